"""Reference for the attention test: PyTorch's scaled_dot_product_attention (causal, GQA)
in float64 on the test's fp32 inputs, and its gradients for the test's dout.

Inputs (raw little-endian float32, token-major as lazytrain lays them out):
  DIR/q.bin, DIR/dout.bin: [B*S, Hq, D];  DIR/k.bin, DIR/v.bin: [B*S, Hkv, D]
Outputs (raw float64, the same layouts): DIR/o.bin, DIR/dq.bin, DIR/dk.bin, DIR/dv.bin,
  DIR/lse.bin: [B, Hq, S], the logsumexp of the scaled causal scores (computed directly:
  SDPA does not return it).

usage: attention_sdpa.py DIR B S Hq Hkv D SCALE
"""
import sys

import numpy as np
import torch
import torch.nn.functional as F

d, B, S, Hq, Hkv, D, scale = sys.argv[1], *map(int, sys.argv[2:7]), float(sys.argv[7])


def load(name, h):
    x = np.fromfile(f"{d}/{name}.bin", dtype=np.float32).reshape(B, S, h, D)
    return torch.from_numpy(x).double().transpose(1, 2).requires_grad_()  # [B, h, S, D]


q, k, v, dout = load("q", Hq), load("k", Hkv), load("v", Hkv), load("dout", Hq)
o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
o.backward(dout.detach())
with torch.no_grad():
    kk = k.repeat_interleave(Hq // Hkv, dim=1)
    s = (q @ kk.transpose(-1, -2)) * scale
    s = s.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)  # [B, Hq, S]


def save(name, t):
    t.detach().transpose(1, 2).contiguous().numpy().tofile(f"{d}/{name}.bin")


save("o", o)
save("dq", q.grad)
save("dk", k.grad)
save("dv", v.grad)
lse.contiguous().numpy().tofile(f"{d}/lse.bin")
