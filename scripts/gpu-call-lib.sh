# Sourced by the one-off scripts of a GPU call (bench/results/*/call-*.sh), run from the repository
# root on the GPU machine with $OUT set: unpacks scripts/gpu-pack's bundle (build-carry/gpu.tar.xz)
# into b/, points the loader at its lib/ and the machine's CUDA, and defines
#   one LIMIT BINARY PATTERN [VAR=VALUE...]  a doctest binary's cases matching PATTERN, its last $TAIL
#                                            (10) lines and its status into $L, a failure's log kept
#   timed NAME LIMIT CMD...                  a command, its status and seconds into $L
# Both set failed=1 on a failure; end the call script with `[ $failed = 0 ]`.
mkdir -p b && tar -C b -xJf build-carry/gpu.tar.xz
export TROUPE_DATA_DIR=$PWD LD_LIBRARY_PATH=$PWD/b/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
B=b/bin L=$OUT/all.txt n=0 failed=0
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$L"
git log --oneline -1 | tee -a "$L"

one() {
  local limit=$1 binary=$2 pattern=$3
  shift 3
  echo "=== $binary: $pattern $*" | tee -a "$L"
  local start=$(date +%s)
  env "$@" timeout "$limit" "$B/$binary" -tc="$pattern" >"$OUT/case.txt" 2>&1
  local rc=$?
  grep -v "^$" "$OUT/case.txt" | grep -v "info\]" | tail -"${TAIL:-10}" | tee -a "$L"
  echo "rc=$rc t=$(($(date +%s) - start))" | tee -a "$L"
  n=$((n + 1))
  [ $rc = 0 ] || { cp "$OUT/case.txt" "$OUT/fail-$n.txt"; failed=1; }
}

timed() {
  local name=$1 limit=$2
  shift 2
  local start=$(date +%s)
  timeout "$limit" "$@"
  local rc=$?
  echo "$name rc=$rc t=$(($(date +%s) - start))" | tee -a "$L"
  [ $rc = 0 ] || failed=1
  return $rc
}
