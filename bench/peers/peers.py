#!/usr/bin/env python3
"""Peers of bench_engine_gpu, measured on the same machine in the same run: Hugging Face
transformers in eager PyTorch, and the same model under torch.compile.

For the shapes bench/engine_gpu.cpp times (models/llama2-13b-shape and models/llama3-8b-shape,
which hold only a config.json), a LlamaForCausalLM with random bf16 weights made on the GPU
(the counterpart of troupe's model.load-format=dummy: nothing is read but the config), SDPA
attention and a static KV cache, and the same steps:
  prefill  one sequence of 1000 and 4096 tokens from position 0, logits for the last row (13B);
  decode   one token for each of 1 and 12 sequences at position 1500, after an untimed
           1500-token prefill of each (13B and 8B). Every repetition writes the same cache slot
           again, so the context stays 1500 tokens, as in bench_engine_gpu.
A step is timed on the host from the call to the end of a device synchronize (its logits stay
on the device; bench_engine_gpu's time includes copying them to the host, ~0.1 ms at most).
torch.compile compiles model.forward for each shape (dynamic=False; mode reduce-overhead, which
replays CUDA graphs, by default); the first calls compile and warm up, untimed.

Prints one JSON line per measurement (to stdout, and to --out FILE, which it starts afresh), flushed
as each is done, so that a run cut short keeps what it measured:
  {"peer": "transformers eager" | "torch.compile", "model": "13B", "step": "prefill" | "decode",
   "batch": 1, "tokens": 1000 (prefill) | "context": 1500 (decode), "median_ms", "min_ms",
   "max_ms", "runs", "warmup", ...}
A case that fails prints {"peer", "model", "step", ..., "error": "..."}; the exit status is then 1.
bench_engine_gpu --peers FILE prints troupe's times beside these.

Usage: peers.py [--models DIR] [--out FILE] [--quick] [--modes eager,compile] [--shapes 13B,8B]
                [--runs N] [--compile-mode MODE]
--quick: a small Llama (4 layers, hidden 512) at small steps: checks this script in a minute.
Needs python3 with torch (CUDA) and transformers; nothing is downloaded.

Status: not yet working. On the H200 (2026-12-04: torch 2.11.0+cu130, transformers 5.17.0) every
case failed with "index_copy_(): index out of bounds" in StaticLayer.update from the second call
on one cache: transformers 5 appears to place new keys after the cache's filled length rather than
at the cache_position passed here. Next: reset the cache (untimed) before each prefill repetition,
and keep decode at a fixed position by clearing its slot, or time decode on a DynamicCache cropped
back after each step. scripts/gpu-run runs it only with TROUPE_GPU_PEERS=1.
"""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

DECODE_CONTEXT = 1500  # bench_engine_gpu's decode_context

# (label, folder under --models, prefill tokens, decode batches): what bench_engine_gpu times in bf16.
FULL_CASES = [
    ("13B", "llama2-13b-shape", [1000, 4096], [1, 12]),
    ("8B", "llama3-8b-shape", [], [1, 12]),
]
QUICK_CONFIG = dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=4, num_attention_heads=8,
                    num_key_value_heads=2, vocab_size=32000, max_position_embeddings=2048, rms_norm_eps=1e-5,
                    rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
QUICK_CONTEXT = 256


def emit(record, out_path):
    line = json.dumps(record, sort_keys=False)
    print(line, flush=True)
    if out_path:
        with open(out_path, "a") as f:
            f.write(line + "\n")


def build_model(torch, transformers, config):
    """Random bf16 weights made on the GPU (an init of 13B on the host would take minutes)."""
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = transformers.LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.to(dtype=torch.bfloat16).eval()


def static_cache(transformers, config, batch, length):
    """A static KV cache of `length` positions. transformers 5 sizes its batch and dtype from the
    first update; older versions take them here."""
    import torch
    try:
        return transformers.StaticCache(config=config, max_cache_len=length)
    except TypeError:
        return transformers.StaticCache(config=config, max_batch_size=batch, max_cache_len=length, device="cuda",
                                        dtype=torch.bfloat16)


def time_step(torch, step, warmup, runs):
    """Median, min and max host milliseconds of step() + synchronize over `runs` calls after `warmup`."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": round(statistics.median(times), 4), "min_ms": round(min(times), 4),
            "max_ms": round(max(times), 4), "runs": runs, "warmup": warmup}


def forward_fn(torch, model, compiled):
    """One forward pass of the model, or of its compiled forward (each call marked as a new step
    for the CUDA graphs of mode reduce-overhead, whose outputs the next call may overwrite)."""
    if compiled is None:
        return lambda **kw: model(**kw)

    def call(**kw):
        torch.compiler.cudagraph_mark_step_begin()
        return compiled(**kw)
    return call


def prefill_case(torch, transformers, model, forward, tokens, warmup, runs):
    ids = torch.randint(3, model.config.vocab_size, (1, tokens), device="cuda")
    positions = torch.arange(tokens, device="cuda")
    cache = static_cache(transformers, model.config, 1, tokens)
    inputs = dict(input_ids=ids, position_ids=positions.unsqueeze(0), cache_position=positions, past_key_values=cache,
                  use_cache=True, logits_to_keep=1)
    with torch.no_grad():
        model(**inputs)  # an eager call makes the cache's tensors: not inside a compiled graph

    @torch.no_grad()
    def step():
        forward(**inputs)
    return time_step(torch, step, warmup, runs)


def decode_cache(torch, transformers, model, batch, context):
    """A cache holding `context` positions of `batch` random sequences (prefilled eagerly, untimed)."""
    cache = static_cache(transformers, model.config, batch, context + 1)
    ids = torch.randint(3, model.config.vocab_size, (batch, context), device="cuda")
    positions = torch.arange(context, device="cuda")
    with torch.no_grad():
        model(input_ids=ids, position_ids=positions.unsqueeze(0).expand(batch, -1), cache_position=positions,
              past_key_values=cache, use_cache=True, logits_to_keep=1)
    return cache


def decode_case(torch, model, forward, cache, batch, context, warmup, runs):
    ids = torch.randint(3, model.config.vocab_size, (batch, 1), device="cuda")
    position = torch.full((batch, 1), context, device="cuda", dtype=torch.long)
    cache_position = torch.tensor([context], device="cuda")

    @torch.no_grad()
    def step():
        forward(input_ids=ids, position_ids=position, cache_position=cache_position, past_key_values=cache,
                use_cache=True, logits_to_keep=1)
    return time_step(torch, step, warmup, runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="models", help="folder of the *-shape model folders")
    parser.add_argument("--out", default="", help="also write the JSON lines to this file")
    parser.add_argument("--quick", action="store_true", help="a small Llama at small steps")
    parser.add_argument("--modes", default="eager,compile", help="eager, compile or both")
    parser.add_argument("--shapes", default="13B,8B", help="labels of the shapes to measure")
    parser.add_argument("--runs", type=int, default=0, help="timed runs (default 20 decode, 5 prefill; >= 5)")
    parser.add_argument("--compile-mode", default="reduce-overhead", help="torch.compile's mode")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in ("eager", "compile") for m in modes):
        parser.error("--modes takes eager and compile")

    if args.out:
        open(args.out, "w").close()
    import torch
    import transformers
    if not torch.cuda.is_available():
        print("peers.py: no CUDA device", file=sys.stderr)
        return 77
    torch.manual_seed(1)
    # Every shape and step is its own compiled graph; the default limit of 8 would fall back to eager.
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    common = {"dtype": "bfloat16", "attention": "sdpa", "cache": "static", "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "transformers": transformers.__version__}

    if args.quick:
        cases = [("quick", None, [128], [1, 4])]
        context = QUICK_CONTEXT
    else:
        wanted = set(args.shapes.split(","))
        cases = [c for c in FULL_CASES if c[0] in wanted]
        context = DECODE_CONTEXT
    decode_runs = max(5, args.runs or (10 if args.quick else 20))
    prefill_runs = max(5, args.runs or 5)
    failed = False
    for label, folder, prefills, batches in cases:
        if folder is None:
            config = transformers.LlamaConfig(**QUICK_CONFIG)
        else:
            config = transformers.AutoConfig.from_pretrained(os.path.join(args.models, folder))
        model = build_model(torch, transformers, config)
        compiled = None
        if "compile" in modes:
            compiled = torch.compile(model.forward, mode=args.compile_mode, dynamic=False)
        # The figures bench_engine_gpu used to quote first: prefill eager, decode compiled; then the rest.
        plan = [("eager", "prefill", n) for n in prefills] + [("compile", "decode", b) for b in batches] + \
               [("eager", "decode", b) for b in batches] + [("compile", "prefill", n) for n in prefills]
        caches = {}
        for mode, step, size in plan:
            if mode not in modes:
                continue
            peer = "torch.compile" if mode == "compile" else "transformers eager"
            record = {"peer": peer, "model": label, "step": step}
            record.update({"batch": 1, "tokens": size} if step == "prefill" else {"batch": size, "context": context})
            if mode == "compile":
                record["compile_mode"] = args.compile_mode
            forward = forward_fn(torch, model, compiled if mode == "compile" else None)
            # Compiling and recording the CUDA graph take the first calls; eager needs a couple to settle.
            warmup = 5 if mode == "compile" else 2
            try:
                start = time.perf_counter()
                if step == "prefill":
                    result = prefill_case(torch, transformers, model, forward, size, warmup, prefill_runs)
                else:
                    if size not in caches:
                        caches[size] = decode_cache(torch, transformers, model, size, context)
                    result = decode_case(torch, model, forward, caches[size], size, context, warmup, decode_runs)
                record.update(result)
                record["wall_s"] = round(time.perf_counter() - start, 1)
            except Exception as e:  # one failed case (an OOM, a compile error) does not stop the others
                traceback.print_exc(file=sys.stderr)
                record["error"] = f"{type(e).__name__}: {e}"[:500]
                failed = True
            record.update(common)
            emit(record, args.out)
        del caches, compiled, model
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
