// Fuzzes the safetensors header check (runtime/safetensors: safetensors_file::parse, what
// open() runs on a mapped file) on any bytes as a file: either model_error, or every
// tensor it lists lies inside the data section, sized by its shape and dtype, and is read
// through in full here (ASan catches a view past the input).
#include <cstddef>
#include <cstdint>
#include <span>

#include "fuzz_support.hpp"
#include "runtime/errors.hpp"
#include "runtime/safetensors.hpp"

using troupe::fuzz::check;
using namespace troupe::runtime;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  safetensors_file file;
  try {
    file = safetensors_file::parse(bytes, "fuzz.safetensors");
  } catch (const model_error&) {
    return 0;
  }
  const auto names = file.names();
  check(names.size() == file.tensor_count(), "names() lists every tensor");
  unsigned sum = 0;
  for (const auto& name : names) {
    check(file.contains(name), "a listed tensor is there");
    const tensor_view t = file.get(name);
    check(t.data.empty() || (t.data.data() >= bytes.data() + 8 && t.data.data() + t.data.size() <= bytes.data() + size),
          "a tensor's bytes lie inside the file, after the length");
    check(static_cast<std::uint64_t>(t.element_count()) * dtype_size(t.dtype) == t.data.size(),
          "a tensor's size is its shape times its dtype's size");
    for (const std::byte b : t.data)
      sum += static_cast<unsigned>(b);
  }
  static volatile unsigned sink;
  sink = sum;
  return 0;
}
