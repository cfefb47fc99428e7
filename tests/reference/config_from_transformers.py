"""Ground truth for lazytrain's config parser, from transformers itself.

  config_from_transformers.py <out_dir>

For each case below, saves a config with transformers' own save_pretrained (so the file
uses the spelling the installed version writes) into <out_dir>/<case>/config.json, builds
the model from that config, and records what the model really is in expected.json:
parameter names and shapes, the parameter count, which biases exist, head_dim, and the
RoPE inverse frequencies of the model's rotary embedding. tests/model/config_test.cpp
parses each config.json and compares. Exits non-zero on any failure.
"""
import json
import os
import sys

import torch
from transformers import (AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config,
                          Qwen3Config)

TINY = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)

CASES = {
    "llama_llama3_biases": LlamaConfig(
        **TINY, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                                 "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 64},
        attention_bias=True, mlp_bias=True, tie_word_embeddings=False, dtype="bfloat16",
        rms_norm_eps=1e-5),
    "llama_linear_tied_headdim": LlamaConfig(
        **TINY, head_dim=16, rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
        tie_word_embeddings=True),
    "mistral_window": MistralConfig(**{**TINY, "num_key_value_heads": 1}, sliding_window=128,
                                    rope_theta=1000000.0),
    "qwen2_tied": Qwen2Config(**TINY, rope_theta=1000000.0, tie_word_embeddings=True, dtype="bfloat16"),
    "qwen3_headdim": Qwen3Config(**TINY, head_dim=16, tie_word_embeddings=True, rms_norm_eps=1e-6),
    # The real Qwen2.5-0.5B shape, built on the meta device (no memory) for its count.
    "qwen2.5_0.5b": Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                                max_position_embeddings=32768, rope_theta=1000000.0,
                                tie_word_embeddings=True, rms_norm_eps=1e-6),
}


def describe(name, config, out):
    big = config.vocab_size > 1000
    if big:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    else:
        model = AutoModelForCausalLM.from_config(config)
    attn = model.model.layers[0].self_attn
    mlp = model.model.layers[0].mlp
    rope = config.rope_parameters
    expected = {
        "model_type": config.model_type,
        "hidden_size": config.hidden_size,
        "num_layers": config.num_hidden_layers,
        "num_heads": config.num_attention_heads,
        "num_kv_heads": config.num_key_value_heads,
        "head_dim": attn.head_dim,
        "intermediate_size": config.intermediate_size,
        "vocab_size": config.vocab_size,
        "max_position_embeddings": config.max_position_embeddings,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": rope["rope_theta"],
        "rope_type": rope["rope_type"],
        "rope_factor": rope.get("factor", 1.0),
        "tie_word_embeddings": model.lm_head.weight is model.model.embed_tokens.weight,
        "qkv_bias": attn.q_proj.bias is not None,
        "o_bias": attn.o_proj.bias is not None,
        "mlp_bias": mlp.gate_proj.bias is not None,
        "qk_norm": hasattr(attn, "q_norm"),
        "dtype": str(config.dtype).replace("torch.", "") if config.dtype is not None else "float32",
        "sliding_window": getattr(config, "sliding_window", None) or 0,
        "num_params": sum(p.numel() for p in model.parameters()),
        "weights": {n: list(p.shape) for n, p in model.named_parameters()},
        "inv_freq": None if big else model.model.rotary_emb.inv_freq.double().tolist(),
    }
    case_dir = os.path.join(out, name)
    config.save_pretrained(case_dir)
    with open(os.path.join(case_dir, "expected.json"), "w") as fh:
        json.dump(expected, fh, indent=1)


def main():
    out = sys.argv[1]
    for name, config in CASES.items():
        describe(name, config, out)
    print("ok", len(CASES))


if __name__ == "__main__":
    main()
