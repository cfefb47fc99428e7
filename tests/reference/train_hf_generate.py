"""Loads a lazytrain checkpoint directory with transformers and tokenizers, and prints the
greedy continuation of a prompt (as token ids) as JSON, so the C++ test can compare it
with lazytrain's own generation.

usage: train_hf_generate.py CHECKPOINT_DIR PROMPT_IDS(comma-separated) MAX_NEW EOS_ID
"""
import json
import sys

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM


def main():
    ckpt, prompt, max_new, eos = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32)
    model.eval()
    Tokenizer.from_file(f"{ckpt}/tokenizer.json")  # the saved tokenizer must load too
    ids = torch.tensor([[int(t) for t in prompt.split(",")]])
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new,
                             do_sample=False, eos_token_id=eos, pad_token_id=eos)
    print(json.dumps({"ids": out[0, ids.shape[1]:].tolist()}))


if __name__ == "__main__":
    main()
