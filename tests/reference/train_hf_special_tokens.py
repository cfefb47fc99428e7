"""Loads a lazytrain checkpoint with transformers' Auto classes, as a user's other tools
would, and prints what they see as JSON: the special tokens (AutoTokenizer), the stop ids
(GenerationConfig, which generate() uses when no eos_token_id is passed), config.json's
ids, and for each conversation in MESSAGES_JSON (a list of message lists) the chat
template's text and token ids.

usage: train_hf_special_tokens.py CHECKPOINT_DIR [MESSAGES_JSON]
"""
import json
import sys

from transformers import AutoConfig, AutoTokenizer, GenerationConfig


def main():
    ckpt = sys.argv[1]
    tok = AutoTokenizer.from_pretrained(ckpt)
    gen = GenerationConfig.from_pretrained(ckpt)
    cfg = AutoConfig.from_pretrained(ckpt)
    eos = gen.eos_token_id
    out = {
        "eos_token": tok.eos_token,
        "eos_token_id": tok.eos_token_id,
        "pad_token": tok.pad_token,
        "bos_token": tok.bos_token,
        "generation_eos": eos if isinstance(eos, list) else [eos],
        "generation_pad": gen.pad_token_id,
        "config_eos": cfg.eos_token_id,
        "model_max_length": tok.model_max_length,
        "chat": [],
    }
    if len(sys.argv) > 2:
        with open(sys.argv[2]) as f:
            conversations = json.load(f)
        for messages in conversations:
            text = tok.apply_chat_template(messages, tokenize=False)
            ids = tok(text, add_special_tokens=False)["input_ids"]
            prompt = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
            out["chat"].append({"text": text, "ids": ids, "generation_prompt": prompt})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
