"""Writes the seed corpora of the fuzz targets (fuzz/corpus/<target>/): small, valid,
real-shaped files, each prefixed with the target's mode byte where it has one (see the
target's header comment). Rerun after a format change; commit what it writes.

  .venv/bin/python fuzz/make_seeds.py BUILD_DIR LAZYTRAIN

BUILD_DIR: the fuzz build (build-san), whose adamw_state_fuzz and safetensors_index_fuzz
write the files the project's own writers make (LT_FUZZ_WRITE_SEEDS). LAZYTRAIN: a
lazytrain binary, for plans (`lazytrain plan --out`). The .venv (scripts/setup.sh --test)
gives transformers' config.json files, safetensors files written by the Python library
and tokenizer.json files written by HF tokenizers (tests/reference/data_tokenizer_parity.py).
"""
import json
import os
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")


def put(target, name, data, mode=None):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    if mode is not None:
        data = bytes([mode]) + data
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors_seeds():
    import numpy as np
    from safetensors.numpy import save
    t = "safetensors_header_fuzz"
    raw = save({"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, dtype=np.float16),
                "i": np.array([1, -2], dtype=np.int64)}, metadata={"format": "pt"})
    put(t, "python_three_dtypes.safetensors", raw, mode=0)
    put(t, "python_empty_tensor.safetensors", save({"e": np.zeros((0, 4), dtype=np.float32)}), mode=0)
    put(t, "python_bf16_like_u8.safetensors", save({"x": np.arange(16, dtype=np.uint8).reshape(4, 4)}), mode=0)
    # Framed form (mode 1): byte 1 = data bytes at the end; the harness writes the length.
    n = struct.unpack("<Q", raw[:8])[0]
    header, data = raw[8:8 + n], raw[8 + n:]
    put(t, "framed_three_dtypes", bytes([len(data)]) + header + data, mode=1)


def config_seeds():
    from transformers import LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config
    t = "model_config_fuzz"
    small = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)
    put(t, "llama.json", LlamaConfig(**small).to_json_string())
    put(t, "llama31_rope_scaling.json", LlamaConfig(**small, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 128}, tie_word_embeddings=True).to_json_string())
    put(t, "llama_linear_bias.json", LlamaConfig(**small, rope_scaling={"rope_type": "linear", "factor": 2.0},
                                                 attention_bias=True, mlp_bias=True).to_json_string())
    put(t, "mistral.json", MistralConfig(**small, sliding_window=128).to_json_string())
    put(t, "qwen2.json", Qwen2Config(**small, tie_word_embeddings=True).to_json_string())
    put(t, "qwen3.json", Qwen3Config(**small, head_dim=32).to_json_string())
    from transformers import Gemma3TextConfig, Qwen3_5TextConfig
    put(t, "qwen3_5_text.json", Qwen3_5TextConfig(**dict(small, num_hidden_layers=4), head_dim=32,
                                                  linear_num_key_heads=2, linear_num_value_heads=4,
                                                  linear_key_head_dim=16, linear_value_head_dim=16).to_json_string())
    put(t, "gemma3_text.json", Gemma3TextConfig(**dict(small, num_hidden_layers=3), head_dim=32,
                                                sliding_window=64, sliding_window_pattern=2).to_json_string())
    put(t, "lazytrain_checkpoint.json", open(os.path.join(ROOT, "fuzz", "seed_sources", "config.json")).read())


def shrink_tokenizer(j, keep_merges=40):
    """The tokenizer's structure with the byte alphabet and its first merges only (ids kept,
    so the added tokens and the post-processor stay as trained)."""
    from tokenizers import pre_tokenizers
    model = j["model"]
    merges = model["merges"][:keep_merges]
    keep = set(pre_tokenizers.ByteLevel.alphabet())
    for m in merges:
        a, b = m if isinstance(m, list) else m.split(" ")
        keep.add(a + b)
    model["vocab"] = {t: i for t, i in model["vocab"].items() if t in keep}
    model["merges"] = merges
    return j


def tokenizer_seeds(tmp):
    t = "tokenizer_fuzz"
    out = os.path.join(tmp, "tok")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "reference", "data_tokenizer_parity.py"), "build", out],
                   check=True, stdout=subprocess.DEVNULL)
    from tokenizers import Tokenizer
    for structure in ("qwen2", "llama3", "gpt2", "llama3_ignore_merges"):
        with open(os.path.join(out, structure, "tokenizer.json"), encoding="utf-8") as f:
            j = shrink_tokenizer(json.load(f))
        text = json.dumps(j, ensure_ascii=False, separators=(",", ":"))
        Tokenizer.from_str(text)  # still a tokenizer HF loads
        put(t, structure + ".json", text.encode() + b"\0Hello world 123 caf\xc3\xa9 <|endoftext|>")
    put(t, "lazytrain_synthetic.json", open(os.path.join(ROOT, "fuzz", "seed_sources", "tokenizer.json"), "rb").read())
    spm_tokenizer_seeds(tmp)


def shrink_spm_tokenizer(j, keep_merges=40):
    """A SentencePiece-style tokenizer cut down as shrink_tokenizer does: the specials, the
    byte tokens, the single characters and the first merges (ids kept)."""
    model = j["model"]
    merges = model["merges"][:keep_merges]
    keep = {a["content"] for a in j["added_tokens"]} | {"<0x%02X>" % b for b in range(256)}
    keep |= {tok for tok in model["vocab"] if len(tok) == 1}
    for m in merges:
        a, b = m if isinstance(m, list) else m.split(" ")
        keep.add(a + b)
    model["vocab"] = {t: i for t, i in model["vocab"].items() if t in keep}
    model["merges"] = merges
    return j


def spm_tokenizer_seeds(tmp):
    """Metaspace, Llama 2 legacy and Gemma structures (tests/reference/data_tokenizer_spm_parity.py)."""
    t = "tokenizer_fuzz"
    out = os.path.join(tmp, "tok_spm")
    subprocess.run([sys.executable, os.path.join(ROOT, "tests", "reference", "data_tokenizer_spm_parity.py"), "build",
                    out], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from tokenizers import Tokenizer
    for structure in ("mistral", "llama2_legacy", "gemma", "metaspace_first_digits"):
        with open(os.path.join(out, structure, "tokenizer.json"), encoding="utf-8") as f:
            j = shrink_spm_tokenizer(json.load(f))
        text = json.dumps(j, ensure_ascii=False, separators=(",", ":"))
        Tokenizer.from_str(text)  # still a tokenizer HF loads
        put(t, "spm_" + structure + ".json",
            text.encode() + "\0<s>Hello  world 123 caf\u00e9 \U0001f980 [INST]x[/INST]\u2581".encode())


def jsonl_seeds():
    t = "jsonl_dataset_fuzz"
    recs = {
        1: [{"text": "The cat sat on the mat."}, {"text": "2 + 2 = 4\n"}],
        2: [{"prompt": "Q: 3 + 4?\nA:", "completion": " 7"}],
        3: [{"instruction": "Add the numbers.", "input": "5 and 6", "output": "11"},
            {"instruction": "Say hi.", "output": "hi"}],
        4: [{"question": "Tom has 3 apples and buys 2. How many?", "answer": "3 + 2 = 5\n#### 5"}],
        5: [{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"},
                          {"role": "assistant", "content": "2"}]}],
    }
    for fmt, rows in recs.items():
        body = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n"
        put(t, f"format{fmt}.jsonl", body, mode=fmt)
        put(t, f"auto{fmt}.jsonl", body, mode=0)
    put(t, "messages_llama3_train_on_prompt.jsonl", json.dumps(recs[5][0]) + "\n", mode=5 | 8 | 16)
    put(t, "skip_bad_lines.jsonl", '{"text": "ok"}\nnot json\n{"prompt": 1}\n\n', mode=1 | 32)
    put(t, "pad_mode.jsonl", json.dumps(recs[4][0]) + "\n", mode=4 | 128)


def plan_seeds(lazytrain, tmp):
    t = "plan_json_fuzz"
    cfg = json.load(open(os.path.join(ROOT, "fuzz", "seed_sources", "config.json")))
    cfg["num_hidden_layers"] = 2
    path = os.path.join(tmp, "config2.json")
    json.dump(cfg, open(path, "w"))
    for policy, extra in (("greedy", []), ("recompute-all", []), ("megatrain", []), ("megatrain-code", []),
                          ("milp", ["--gpu-cap", "0.0045", "--act-budget", "cpu=0.0005,nvme=1"])):
        out = os.path.join(tmp, f"plan-{policy}.json")
        r = subprocess.run([lazytrain, "plan", "--model", path, "--batch", "2", "--seq", "32", "--policy", policy,
                            "--time-limit", "5", "--out", out] + extra, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if r.returncode == 0 and os.path.exists(out):
            put(t, f"{policy}.json", json.dumps(json.load(open(out)), separators=(",", ":")))
        else:
            print("plan seed", policy, "failed:", r.stderr.decode()[-300:], file=sys.stderr)


def yaml_seeds():
    t = "train_config_yaml_fuzz"
    put(t, "checkpoint_train_config.yaml", open(os.path.join(ROOT, "fuzz", "seed_sources", "train_config.yaml")).read())
    put(t, "small.yaml", "model: \"\"\nseq_len: 64\nbatch: 4\nsteps: 10\noptimizer: adamw\nlr: 1.0e-3\n"
                         "train_on_prompt: true\nformat: messages\nchat_template: llama3\n")
    put(t, "flow.yaml", "{steps: 5, lr: 0.01, precision: f32, output_dir: 'runs/x'}\n")


def state_seeds():
    t = "trainer_state_fuzz"
    put(t, "trainer_state.json", json.dumps({"data_position": {"epoch": 2, "index": 1, "offset": 3}, "loss": 0.16,
                                             "step": 1000, "tokens_seen": 2048000.0}, indent=2) + "\n", mode=0)
    put(t, "optimizer_state.json", open(os.path.join(ROOT, "fuzz", "seed_sources", "optimizer_state.json")).read(), mode=1)


def written_by_targets(build, tmp):
    env = dict(os.environ, LT_FUZZ_WRITE_SEEDS=tmp)
    for target in ("adamw_state_fuzz", "safetensors_index_fuzz"):
        subprocess.run([os.path.join(build, "fuzz", target), "-runs=0"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for name in ("fresh.bin", "stepped.bin"):
        raw = open(os.path.join(tmp, name), "rb").read()
        put("adamw_state_fuzz", name, raw, mode=0)
        put("adamw_state_fuzz", name + ".pager", raw, mode=2)
        put("adamw_state_fuzz", name + ".no_trailer", raw[:-16], mode=1)
        put("adamw_state_fuzz", name + ".no_trailer.pager", raw[:-16], mode=3)
    put("safetensors_index_fuzz", "writer_index.json", open(os.path.join(tmp, "model.safetensors.index.json")).read())
    for shard in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        put("safetensors_header_fuzz", "writer_" + shard, open(os.path.join(tmp, shard), "rb").read(), mode=0)


def main():
    build, lazytrain = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory() as tmp:
        safetensors_seeds()
        config_seeds()
        tokenizer_seeds(tmp)
        jsonl_seeds()
        plan_seeds(lazytrain, tmp)
        yaml_seeds()
        state_seeds()
        written_by_targets(build, tmp)


if __name__ == "__main__":
    main()
