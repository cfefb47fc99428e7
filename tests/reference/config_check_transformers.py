"""Checks that transformers loads what lazytrain writes, as the same model.

  config_check_transformers.py <model_dir> [<model_dir> ...]

Each <model_dir> holds, written by tests/model/config_test.cpp: config.json (from
model_config_to_json), model.safetensors (every tensor of all_weight_specs, filled with
distinct values) and expected.json ({"num_params", "weights": {name: shape}, "inv_freq"}).
Loads the directory with AutoModelForCausalLM.from_pretrained and checks: no missing,
unexpected or mismatched weights; every loaded value equals the file's; parameter names,
shapes and count match lazytrain's specs; the rotary inverse frequencies match
rope_inv_freq (fp32 vs double: relative 2e-6, derived below). Exits non-zero on failure.
"""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM


def check(model_dir):
    with open(os.path.join(model_dir, "expected.json")) as fh:
        expected = json.load(fh)
    AutoConfig.from_pretrained(model_dir)  # parses on its own, too
    model, info = AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True, dtype=torch.float32)
    for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info.get(key):
            sys.exit(f"{model_dir}: {key}: {info[key]}")
    got = {n: list(p.shape) for n, p in model.named_parameters()}
    if got != expected["weights"]:
        sys.exit(f"{model_dir}: parameters differ\n transformers: {got}\n lazytrain: {expected['weights']}")
    n = sum(p.numel() for p in model.parameters())
    if n != expected["num_params"]:
        sys.exit(f"{model_dir}: transformers counts {n} parameters, lazytrain {expected['num_params']}")
    state = model.state_dict()
    for name, t in load_file(os.path.join(model_dir, "model.safetensors")).items():
        if not torch.equal(state[name], t.float()):
            sys.exit(f"{model_dir}: {name} was not loaded from the file")
    # transformers computes inv_freq in fp32: theta^(2j/D) has a relative error of about
    # ln(theta) * 2^-24 (<= 14 * 6e-8 ~ 8.4e-7 for theta <= 1e6) plus a few roundings.
    ours = torch.tensor(expected["inv_freq"], dtype=torch.float64)
    theirs = model.model.rotary_emb.inv_freq.double()
    rel = ((theirs - ours).abs() / ours.abs()).max().item()
    if ours.shape != theirs.shape or rel > 2e-6:
        sys.exit(f"{model_dir}: inv_freq differs (max rel {rel})\n ours {ours}\n theirs {theirs}")
    print(model_dir, "ok")


def main():
    for model_dir in sys.argv[1:]:
        check(model_dir)


if __name__ == "__main__":
    main()
