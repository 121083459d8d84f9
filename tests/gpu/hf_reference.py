#!/usr/bin/env python3
"""An independent reference for the CUDA backend, run on the GPU machine.

Builds randomly initialized models of realistic shape with Hugging Face
transformers (a Llama: hidden 2048, 16 layers, 32/8 heads, vocab 32000; a
Qwen2-style one: q/k/v bias, tied embeddings; and a Qwen3 of Qwen3-0.6B's widths:
per-head q/k RMSNorm, head_dim 128 with 16 heads in a hidden size of 1024, tied
embeddings; a Mistral whose every layer has a sliding window of 96 positions and a
Qwen2 whose layers from max_window_layers 3 have one of 100, shorter than every
prompt; a Phi-3, MHA with fused qkv_proj / gate_up_proj, with a window of 80),
saves them with save_pretrained
(bf16 safetensors + config.json), and writes the models' own logits for a few
prompts of a few hundred random tokens, teacher-forced:

  OUT/<name>/                 the saved model (what troupe loads)
  OUT/<name>/reference.json   {"prompts": [{"ids": [...], "logits": "p0.f32"}], "vocab": V}
  OUT/<name>/p<i>.f32         transformers' bf16 logits [tokens, vocab], as float32, row-major
  OUT/<name>/p<i>.fp32.f32    the same model (its bf16 weights) computed in fp32

tests/gpu/hf_reference_gpu_test.cpp compares troupe's logits with these.
Usage: hf_reference.py OUT [NAME...]   (NAMEs: only those models, e.g. mistral_sliding)
"""
import json
import os
import sys

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)


def models():
    llama = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=16, num_attention_heads=32,
                        num_key_value_heads=8, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5,
                        rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    qwen2 = Qwen2Config(hidden_size=1536, intermediate_size=4096, num_hidden_layers=12, num_attention_heads=12,
                        num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-6,
                        rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False,
                        bos_token_id=1, eos_token_id=2)
    qwen3 = Qwen3Config(hidden_size=1024, intermediate_size=3072, num_hidden_layers=8, num_attention_heads=16,
                        num_key_value_heads=8, head_dim=128, vocab_size=32000, max_position_embeddings=4096,
                        rms_norm_eps=1e-6, rope_theta=1000000.0, attention_bias=False, tie_word_embeddings=True,
                        use_sliding_window=False, bos_token_id=1, eos_token_id=2)
    mistral_sliding = MistralConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=16,
                                    num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096,
                                    rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=96,
                                    tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    qwen2_sliding = Qwen2Config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=8,
                                num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096,
                                rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True,
                                use_sliding_window=True, sliding_window=100, max_window_layers=3,
                                bos_token_id=1, eos_token_id=2)
    phi3_sliding = Phi3Config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=16,
                              num_key_value_heads=16, vocab_size=32000, max_position_embeddings=4096,
                              original_max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                              sliding_window=80, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                              pad_token_id=0)
    return [("llama", LlamaForCausalLM, llama), ("qwen2", Qwen2ForCausalLM, qwen2), ("qwen3", Qwen3ForCausalLM, qwen3),
            ("mistral_sliding", MistralForCausalLM, mistral_sliding),
            ("qwen2_sliding", Qwen2ForCausalLM, qwen2_sliding),
            ("phi3_sliding", Phi3ForCausalLM, phi3_sliding)]


def main():
    out = sys.argv[1]
    only = set(sys.argv[2:])
    # The fp32 truth must be fp32 all the way: no TF32 in matmuls or attention.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    for index, (name, cls, config) in enumerate(models()):
        if only and name not in only:
            continue
        torch.manual_seed(1234 + index)
        config._attn_implementation = "eager"  # plain matmul + softmax attention, for both dtypes
        model = cls(config).to(dtype=torch.bfloat16, device="cuda").eval()
        if name.startswith("qwen2"):
            # Random biases (the default init leaves them 0, which would not test them).
            with torch.no_grad():
                for layer in model.model.layers:
                    for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                        proj.bias.normal_(0.0, 0.02)
        if name == "qwen3":
            # Random q/k norm weights (the default init is all ones, which would not test them).
            with torch.no_grad():
                for layer in model.model.layers:
                    layer.self_attn.q_norm.weight.normal_(1.0, 0.2)
                    layer.self_attn.k_norm.weight.normal_(1.0, 0.2)
        folder = os.path.join(out, name)
        model.save_pretrained(folder, safe_serialization=True)
        # Every reference below comes from the checkpoint as transformers loads it: the model in
        # memory before saving computes logits 1-3% away from it (seen with transformers 5.17),
        # and the file is what troupe reads.
        in_memory = model
        model = cls.from_pretrained(folder, dtype=torch.bfloat16, attn_implementation="eager").cuda().eval()
        generator = torch.Generator().manual_seed(99 + index)
        prompts = []
        for p, length in enumerate((300, 257, 384)):
            ids = torch.randint(3, config.vocab_size, (length,), generator=generator)
            ids[0] = 1  # BOS
            with torch.no_grad():
                logits = model(ids.unsqueeze(0).cuda()).logits[0].float().cpu()
            path = f"p{p}.f32"
            logits.numpy().astype("float32").tofile(os.path.join(folder, path))
            prompts.append({"ids": ids.tolist(), "logits": path, "logits_fp32": f"p{p}.fp32.f32"})
        # The same checkpoint computed in fp32: the truth both bf16 runs are judged against
        # (the in-memory model's distance from it is logged, for the record).
        in_memory = in_memory.float()
        model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").cuda().eval()
        for prompt in prompts:
            with torch.no_grad():
                ids = torch.tensor(prompt["ids"]).unsqueeze(0).cuda()
                logits = model(ids).logits[0].float().cpu()
                before = in_memory(ids).logits[0].float().cpu()
            rel = float((logits - before).norm() / before.norm())
            print(f"hf_reference: {name}: reloaded vs in-memory fp32 logits: relative L2 {rel:.3g}", flush=True)
            logits.numpy().astype("float32").tofile(os.path.join(folder, prompt["logits_fp32"]))
        del in_memory
        # And the first prompt on the CPU in fp32, a third opinion that no GPU kernel choice can sway.
        model = model.cpu()
        with torch.no_grad():
            logits = model(torch.tensor(prompts[0]["ids"]).unsqueeze(0)).logits[0].float()
        prompts[0]["logits_cpu"] = "p0.cpu.f32"
        logits.numpy().astype("float32").tofile(os.path.join(folder, "p0.cpu.f32"))
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump({"prompts": prompts, "vocab": config.vocab_size}, f)
        print(f"hf_reference: {name}: saved to {folder}, {len(prompts)} prompts", flush=True)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
