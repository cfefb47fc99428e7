"""Interoperability of lazytrain's safetensors reader/writer with the `safetensors` package.

  write <file>          writes the reference tensors below (read and checked by C++)
  verify <file>         checks a file C++ wrote holds exactly the reference tensors
  verify_sharded <dir>  checks a sharded C++ checkpoint (index + shards) the same way

The C++ side (tests/io/safetensors_interop_test.cpp) builds the same tensors with the
same formulas; every value is exactly representable in its dtype, so comparisons are exact.
Exits non-zero on any mismatch.
"""
import json
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import save_file


def reference_tensors():
    def idx(n):
        return torch.arange(n, dtype=torch.float64)

    return {
        "f64": (idx(7) / 3.0).reshape(7),
        "f32": (idx(15) * 0.5 - 3.0).to(torch.float32).reshape(3, 5),
        "bf16": ((idx(16) - 8.0) * 0.25).to(torch.bfloat16).reshape(4, 4),
        "f16": (idx(6) * 0.125).to(torch.float16).reshape(2, 3),
        "i64": (torch.arange(4, dtype=torch.int64) * 1000000007 - 5).reshape(2, 2),
        "i32": (torch.arange(5, dtype=torch.int32) * -7),
        "i16": (torch.arange(3, dtype=torch.int16) * 300 - 1),
        "i8": (torch.arange(6, dtype=torch.int8) - 3),
        "u8": (torch.arange(3, dtype=torch.uint8) * 80),
        "bool": (torch.arange(4) % 2 == 1),
        "empty": torch.zeros(0, 3, dtype=torch.float32),
        "model.layers.0.self_attn.q_proj.weight": (idx(12) * 0.5).to(torch.float32).reshape(4, 3),
    }


def check_equal(name, got, want, where):
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape) or not torch.equal(got, want):
        sys.exit(f"{where}: tensor {name} differs: got {got.dtype} {tuple(got.shape)} {got.flatten()[:8]}, "
                 f"want {want.dtype} {tuple(want.shape)} {want.flatten()[:8]}")


def verify_file(path, want, expect_metadata):
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
        for k, v in expect_metadata.items():
            if meta.get(k) != v:
                sys.exit(f"{path}: metadata {k!r} = {meta.get(k)!r}, want {v!r} (all: {meta})")
        names = set(f.keys())
        for name in names:
            check_equal(name, f.get_tensor(name), want[name], path)
    # The reference writer pads the header to 8 bytes; we promise the same.
    with open(path, "rb") as fh:
        n = int.from_bytes(fh.read(8), "little")
    if n % 8 != 0:
        sys.exit(f"{path}: header length {n} is not a multiple of 8")
    return names


def main():
    mode, target = sys.argv[1], sys.argv[2]
    want = reference_tensors()
    if mode == "write":
        save_file(want, target, metadata={"source": "python", "format": "pt"})
    elif mode == "verify":
        names = verify_file(target, want, {"source": "cpp", "format": "pt"})
        if names != set(want):
            sys.exit(f"{target}: tensors {sorted(names)} != {sorted(want)}")
    elif mode == "verify_sharded":
        with open(os.path.join(target, "model.safetensors.index.json")) as fh:
            index = json.load(fh)
        weight_map = index["weight_map"]
        if set(weight_map) != set(want):
            sys.exit(f"index names {sorted(weight_map)} != {sorted(want)}")
        total = sum(t.numel() * t.element_size() for t in want.values())
        if index["metadata"]["total_size"] != total:
            sys.exit(f"total_size {index['metadata']['total_size']} != {total}")
        seen = set()
        for shard in sorted(set(weight_map.values())):
            names = verify_file(os.path.join(target, shard), want, {"format": "pt"})
            for name in names:
                if weight_map[name] != shard:
                    sys.exit(f"{name} is in {shard} but the index maps it to {weight_map[name]}")
            seen |= names
        if seen != set(want):
            sys.exit(f"shards hold {sorted(seen)}, want {sorted(want)}")
    else:
        sys.exit(f"unknown mode {mode}")
    print("ok")


if __name__ == "__main__":
    main()
