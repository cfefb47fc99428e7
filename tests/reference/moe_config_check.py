"""Checks that transformers reads qwen3_moe / mixtral configs as lazytrain does.

  moe_config_check.py <case_dir> [<case_dir> ...]

Each <case_dir> holds, written by tests/model/moe_config_test.cpp: input.json (a config as
a user would give it, often leaving fields to the class defaults), config.json (what
model_config_to_json wrote after parsing input.json) and expected.json (lazytrain's reading:
the MoE fields, head_dim, num_key_value_heads, rms_norm_eps, rope_theta, sliding_window
(0: none) and, when "build" is true, which layers are sparse). Both configs are loaded
with AutoConfig and must give the expected values; with "build", a model is instantiated
from config.json and its layers' MLP classes must be the expected sparse/dense pattern.
Exits non-zero on the first difference.
"""
import json
import os
import sys

from transformers import AutoConfig, AutoModelForCausalLM


def reading(cfg):
    mixtral = cfg.model_type == "mixtral"
    rope = cfg.rope_parameters or {}
    return {
        "num_experts": cfg.num_local_experts if mixtral else cfg.num_experts,
        "experts_per_token": cfg.num_experts_per_tok,
        # Mixtral's experts are intermediate_size wide; it always renormalizes.
        "expert_intermediate": cfg.intermediate_size if mixtral else cfg.moe_intermediate_size,
        "norm_topk_prob": True if mixtral else cfg.norm_topk_prob,
        "decoder_sparse_step": 1 if mixtral else cfg.decoder_sparse_step,
        "mlp_only_layers": [] if mixtral else list(cfg.mlp_only_layers),
        "router_aux_loss_coef": cfg.router_aux_loss_coef,
        "output_router_logits": cfg.output_router_logits,
        # Qwen3MoeAttention: getattr(config, "head_dim", hidden // heads); Mixtral: `or`.
        "head_dim": getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads,
        "num_kv_heads": cfg.num_key_value_heads,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": rope.get("rope_theta"),
        "sliding_window": cfg.sliding_window or 0,
    }


def check(case_dir):
    with open(os.path.join(case_dir, "expected.json")) as fh:
        expected = json.load(fh)
    build = expected.pop("build")
    sparse = expected.pop("sparse_layers")
    for name in ("input.json", "config.json"):
        cfg = AutoConfig.from_pretrained(os.path.join(case_dir, name))
        got = reading(cfg)
        for key, want in expected.items():
            if isinstance(want, float) and got[key] is not None:
                same = abs(got[key] - want) <= 1e-12 * abs(want)
            else:
                same = got[key] == want
            if not same:
                sys.exit(f"{case_dir}/{name}: {key}: transformers reads {got[key]!r}, lazytrain {want!r}")
    if build:
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(os.path.join(case_dir, "config.json")))
        got = [type(layer.mlp).__name__.endswith("SparseMoeBlock") for layer in model.model.layers]
        if got != sparse:
            sys.exit(f"{case_dir}: sparse layers: transformers {got}, lazytrain {sparse}")
    print(case_dir, "ok")


def main():
    for case_dir in sys.argv[1:]:
        check(case_dir)


if __name__ == "__main__":
    main()
