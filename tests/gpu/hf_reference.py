#!/usr/bin/env python3
"""An independent reference for the CUDA backend, run on the GPU machine.

Builds randomly initialized models of realistic shape with Hugging Face
transformers (a Llama: hidden 2048, 16 layers, 32/8 heads, vocab 32000; a
Qwen2-style one: q/k/v bias, tied embeddings; and a Qwen3 of Qwen3-0.6B's widths:
per-head q/k RMSNorm, head_dim 128 with 16 heads in a hidden size of 1024, tied
embeddings; a Mistral whose every layer has a sliding window of 96 positions and a
Qwen2 whose layers from max_window_layers 3 have one of 100, shorter than every
prompt; a Phi-3, MHA with fused qkv_proj / gate_up_proj, with a window of 80; a Gemma 2 with
soft caps that matter, every other layer sliding over 100 positions, and a Gemma 3 with q/k norms,
two RoPE bases and linear scaling on its global layers; every Gemma norm weight random; and the mixtures
of experts: a Mixtral of 8 experts, top 2; a Qwen2-MoE of 16, top 4 unnormalized, with its sigmoid-gated
shared expert; a Qwen3-MoE of 32, top 8 renormalized, with q/k norms; every router scaled up so that its
choices are decisive and the shared expert's gate random), saves them with save_pretrained
(bf16 safetensors + config.json), and writes the models' own logits for a few
prompts of a few hundred random tokens, teacher-forced:

  OUT/<name>/                 the saved model (what troupe loads)
  OUT/<name>/reference.json   {"prompts": [{"ids": [...], "logits": "p0.f32"}], "vocab": V}
  OUT/<name>/p<i>.f32         transformers' bf16 logits [tokens, vocab], as float32, row-major
  OUT/<name>/p<i>.fp32.f32    the same model (its bf16 weights) computed in fp32

tests/gpu/hf_reference_gpu_test.cpp compares troupe's logits with these.
Usage: hf_reference.py OUT [NAME...]   (NAMEs: only those models, e.g. mistral_sliding)

With --tiny, the same families at tiny widths (hidden 32, 2-3 layers, vocab 128) become the CPU
backend's goldens (tests/unit/family_golden_test.cpp reads them from tests/data/families):

  OUT/<name>/config.json, model.safetensors   bf16 weights
  OUT/<name>/golden.json                      {"ids": [...]} (24 tokens, past every window)
  OUT/<name>/golden.f32                       transformers' fp32 logits of them on the CPU [24, 128]

The mixtures of experts print the tensor names of the checkpoint they saved (transformers 4.x and 5.x
store the experts differently; troupe reads both).
"""
import glob
import json
import os
import sys

import torch
import transformers
from safetensors import safe_open
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                          LlamaForCausalLM, MistralConfig, MistralForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Phi3Config, Phi3ForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen2MoeConfig,
                          Qwen2MoeForCausalLM, Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

V5 = int(transformers.__version__.split(".")[0]) >= 5


def gemma3_config(**shape):
    """Gemma 3: 2 sliding layers to a full one, local base 10000, global 1e6 with linear scaling x8."""
    layers = shape["num_hidden_layers"]
    kinds = ["full_attention" if (i + 1) % 3 == 0 else "sliding_attention" for i in range(layers)]
    if V5:
        rope = {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
                                    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}}
    else:
        rope = {"rope_theta": 1e6, "rope_local_base_freq": 10000.0,
                "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    ids = {"tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}
    return Gemma3TextConfig(layer_types=kinds, **rope, **dict(ids, **shape))


MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe")


def is_moe(name):
    return name.startswith(MOE_FAMILIES)


def randomize(name, model, score_gain=6.0, router_gain=3.0):
    """Weights the default init leaves constant, drawn at random so that they are tested."""
    with torch.no_grad():
        if is_moe(name):
            for layer in model.model.layers:
                # transformers 5 names the block mlp for every family; 4.x Mixtral block_sparse_moe.
                block = layer.mlp if hasattr(layer, "mlp") else layer.block_sparse_moe
                hidden = block.gate.weight.shape[-1]
                # Router logits of a few units (the default init gives |logit| << 1, nearly uniform
                # probabilities whose order bf16 rounding would decide): the choices are the model's.
                block.gate.weight.normal_(0.0, router_gain / hidden ** 0.5)
                if hasattr(block, "shared_expert_gate"):
                    # sigmoid(gate . x) spread over (0, 1) rather than about 1/2 for every token.
                    block.shared_expert_gate.weight.normal_(0.0, 2.0 / hidden ** 0.5)
        if name.startswith("qwen2"):
            for layer in model.model.layers:
                for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                    proj.bias.normal_(0.0, 0.02)
        if name.startswith("qwen3"):
            for layer in model.model.layers:
                layer.self_attn.q_norm.weight.normal_(1.0, 0.2)
                layer.self_attn.k_norm.weight.normal_(1.0, 0.2)
        if name.startswith("gemma"):
            # Gemma's norms scale by (1 + weight) and start at 0.
            for module in model.modules():
                if type(module).__name__.endswith("RMSNorm"):
                    module.weight.normal_(0.0, 0.3)
        if name.startswith("gemma2"):
            # Scores large enough for the attention soft cap to bend them (random q and k give |score| << 1).
            for layer in model.model.layers:
                layer.self_attn.q_proj.weight.mul_(score_gain)
                layer.self_attn.k_proj.weight.mul_(score_gain)


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
    # Soft caps small enough to matter for random weights (the real 50 and 30 would not bend these scores).
    gemma2 = Gemma2Config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=8,
                          num_key_value_heads=4, head_dim=128, query_pre_attn_scalar=144, vocab_size=32000,
                          max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=100,
                          attn_logit_softcapping=20.0, final_logit_softcapping=2.0, tie_word_embeddings=True,
                          bos_token_id=1, eos_token_id=2, pad_token_id=0)
    gemma3 = gemma3_config(hidden_size=1024, intermediate_size=2816, num_hidden_layers=6, num_attention_heads=8,
                           num_key_value_heads=2, head_dim=128, query_pre_attn_scalar=96, vocab_size=32000,
                           max_position_embeddings=4096, rms_norm_eps=1e-6, sliding_window=100)
    # The mixtures of experts at the widths of the real ones' layers (Mixtral's 8 experts, top 2; Qwen1.5-MoE's
    # MHA, unnormalized top 4 and shared expert; Qwen3-30B-A3B's GQA, head_dim 128 and renormalized top 8),
    # fewer experts and layers.
    mixtral = MixtralConfig(hidden_size=1024, intermediate_size=1792, num_hidden_layers=4, num_attention_heads=16,
                            num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-5,
                            rope_theta=1e6, num_local_experts=8, num_experts_per_tok=2, sliding_window=None,
                            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    qwen2_moe = Qwen2MoeConfig(hidden_size=1024, intermediate_size=2816, moe_intermediate_size=704,
                               shared_expert_intermediate_size=2816, num_experts=16, num_experts_per_tok=4,
                               norm_topk_prob=False, decoder_sparse_step=1, mlp_only_layers=[], num_hidden_layers=4,
                               num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                               max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1e6,
                               use_sliding_window=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    qwen3_moe = Qwen3MoeConfig(hidden_size=1024, intermediate_size=3072, moe_intermediate_size=384, num_experts=32,
                               num_experts_per_tok=8, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                               num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=4, head_dim=128,
                               vocab_size=32000, max_position_embeddings=4096, rms_norm_eps=1e-6, rope_theta=1e6,
                               attention_bias=False, use_sliding_window=False, tie_word_embeddings=False,
                               bos_token_id=1, eos_token_id=2)
    return [("llama", LlamaForCausalLM, llama), ("qwen2", Qwen2ForCausalLM, qwen2), ("qwen3", Qwen3ForCausalLM, qwen3),
            ("mistral_sliding", MistralForCausalLM, mistral_sliding),
            ("qwen2_sliding", Qwen2ForCausalLM, qwen2_sliding),
            ("phi3_sliding", Phi3ForCausalLM, phi3_sliding),
            ("gemma2", Gemma2ForCausalLM, gemma2), ("gemma3", Gemma3ForCausalLM, gemma3),
            ("mixtral", MixtralForCausalLM, mixtral), ("qwen2_moe", Qwen2MoeForCausalLM, qwen2_moe),
            ("qwen3_moe", Qwen3MoeForCausalLM, qwen3_moe)]


def tiny_models():
    """Every family at widths whose bf16 checkpoint is a few tens of KiB, with windows of 8 and 10."""
    common = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                  vocab_size=128, max_position_embeddings=256, bos_token_id=1, eos_token_id=2)
    gemma = dict(common, head_dim=8, pad_token_id=0, num_hidden_layers=3, sliding_window=10)
    return [
        ("llama", LlamaForCausalLM, LlamaConfig(num_hidden_layers=2, rms_norm_eps=1e-5, rope_theta=10000.0,
                                                tie_word_embeddings=False, **common)),
        ("qwen2", Qwen2ForCausalLM, Qwen2Config(num_hidden_layers=2, rope_theta=1e6, tie_word_embeddings=True,
                                                use_sliding_window=False, **common)),
        ("qwen3", Qwen3ForCausalLM, Qwen3Config(num_hidden_layers=2, head_dim=16, rope_theta=1e6,
                                                tie_word_embeddings=True, use_sliding_window=False, **common)),
        ("mistral_sliding", MistralForCausalLM, MistralConfig(num_hidden_layers=2, sliding_window=8,
                                                              tie_word_embeddings=False, **common)),
        ("qwen2_sliding", Qwen2ForCausalLM, Qwen2Config(num_hidden_layers=3, use_sliding_window=True,
                                                        sliding_window=8, max_window_layers=1,
                                                        tie_word_embeddings=True, **common)),
        ("phi3_sliding", Phi3ForCausalLM, Phi3Config(num_hidden_layers=2, original_max_position_embeddings=256,
                                                     sliding_window=8, tie_word_embeddings=False, pad_token_id=0,
                                                     **dict(common, num_key_value_heads=4))),
        ("gemma2", Gemma2ForCausalLM, Gemma2Config(query_pre_attn_scalar=12, attn_logit_softcapping=5.0,
                                                   final_logit_softcapping=0.25, tie_word_embeddings=True, **gemma)),
        ("gemma3", Gemma3ForCausalLM, gemma3_config(query_pre_attn_scalar=6, **gemma)),
        # Enough experts that routing matters, each 32 rows (16 for Qwen3-MoE's 16): 100-200 KiB in bf16.
        ("mixtral", MixtralForCausalLM, MixtralConfig(num_hidden_layers=2, num_local_experts=8, num_experts_per_tok=2,
                                                      sliding_window=None, tie_word_embeddings=False,
                                                      **dict(common, intermediate_size=32))),
        ("qwen2_moe", Qwen2MoeForCausalLM, Qwen2MoeConfig(num_hidden_layers=2, num_experts=8, num_experts_per_tok=2,
                                                          moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                                          norm_topk_prob=False, decoder_sparse_step=1,
                                                          mlp_only_layers=[], rope_theta=1e6,
                                                          use_sliding_window=False, tie_word_embeddings=False,
                                                          **common)),
        ("qwen3_moe", Qwen3MoeForCausalLM, Qwen3MoeConfig(num_hidden_layers=2, head_dim=16, num_experts=16,
                                                          num_experts_per_tok=4, moe_intermediate_size=16,
                                                          norm_topk_prob=True, decoder_sparse_step=1,
                                                          mlp_only_layers=[], rope_theta=1e6, attention_bias=False,
                                                          use_sliding_window=False, tie_word_embeddings=True,
                                                          **common)),
    ]


def print_tensor_names(name, folder):
    """A mixture of experts' stored tensor names and shapes: which expert layout this transformers saved."""
    if not is_moe(name):
        return
    for path in sorted(glob.glob(os.path.join(folder, "*.safetensors"))):
        with safe_open(path, framework="pt") as f:
            for key in sorted(f.keys()):
                print(f"hf_reference: {name}: {os.path.basename(path)}: {key} {list(f.get_slice(key).get_shape())}",
                      flush=True)


def write_goldens(out, only):
    """The CPU backend's goldens: tiny checkpoints and transformers' fp32 logits of one prompt, on the CPU."""
    for index, (name, cls, config) in enumerate(tiny_models()):
        if only and name not in only:
            continue
        torch.manual_seed(4321 + index)
        config._attn_implementation = "eager"
        model = cls(config).eval()
        randomize(name, model, score_gain=25.0)  # 32-wide projections give smaller scores than 1024-wide
        folder = os.path.join(out, name)
        model.to(dtype=torch.bfloat16).save_pretrained(folder, safe_serialization=True)
        print_tensor_names(name, folder)
        for extra in ("generation_config.json",):
            if os.path.exists(os.path.join(folder, extra)):
                os.remove(os.path.join(folder, extra))
        model = cls.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
        generator = torch.Generator().manual_seed(77 + index)
        ids = torch.randint(3, config.vocab_size, (24,), generator=generator)
        ids[0] = 1
        with torch.no_grad():
            logits = model(ids.unsqueeze(0)).logits[0].float()
        logits.numpy().astype("float32").tofile(os.path.join(folder, "golden.f32"))
        with open(os.path.join(folder, "golden.json"), "w") as f:
            json.dump({"ids": ids.tolist(), "transformers": transformers.__version__}, f)
        print(f"hf_reference: golden {name}: {folder}", flush=True)


def main():
    args = sys.argv[1:]
    if args and args[0] == "--tiny":
        write_goldens(args[1], set(args[2:]))
        return
    out = args[0]
    only = set(args[1:])
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
        randomize(name, model)
        folder = os.path.join(out, name)
        model.save_pretrained(folder, safe_serialization=True)
        print_tensor_names(name, folder)
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
