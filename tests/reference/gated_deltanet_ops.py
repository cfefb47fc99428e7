"""Reference for the Gated DeltaNet kernel tests: transformers' own Qwen3.5 functions
(models/qwen3_5/modeling_qwen3_5.py: torch_chunk_gated_delta_rule with
use_qk_l2norm_in_kernel=True, causal_conv1d_fn with activation "silu" and no bias, and
Qwen3_5RMSNormGated), run with autograd in float64 on the test's fp32 inputs.

Those functions cast their inputs to float32 themselves. To run them in float64 they are
called through copies over the module's globals in which `torch.float32` is float64
(transformers_torch_path.py); nothing else in them changes. The torch-only paths are the
ones checked: they are found behind transformers' hub-kernel wrappers by their code, and
the script fails, naming the transformers version, if that is not the code in
modeling_qwen3_5.py.

Inputs (raw little-endian float32, lazytrain's layouts):
  q.bin, k.bin [B,S,Hk,dk]; v.bin, dout.bin [B,S,Hv,dv]; g.bin, beta.bin [B,S,Hv];
  s0.bin, dfinal.bin [B,Hv,dk,dv]; cx.bin, cdy.bin [B,S,Cc]; cw.bin [Cc,K];
  nx.bin, nz.bin, ndy.bin [T,D]; nw.bin [D]
Outputs (raw float64, the same layouts): o, fin, dq, dk, dv, dg, dbeta, ds0 (gated delta
rule, for L = sum dout . o + sum dfinal . fin); cy, cdx, cdw (conv); ny, ndx, ndz, ndw (norm).

usage: gated_deltanet_ops.py DIR B S Hk Hv dk dv CHUNK Cc K T D EPS
"""
import sys

import numpy as np
import torch

from transformers.models.qwen3_5 import modeling_qwen3_5 as m
from transformers_torch_path import function, method, module_namespace

d = sys.argv[1]
B, S, Hk, Hv, dk, dv, chunk, Cc, K, T, D = map(int, sys.argv[2:13])
eps = float(sys.argv[13])


f64 = module_namespace(m, float64=True)


def load(name, *shape):
    x = np.fromfile(f"{d}/{name}.bin", dtype=np.float32).reshape(*shape)
    return torch.from_numpy(x).double().requires_grad_()


def save(name, t):
    t.detach().contiguous().numpy().astype(np.float64).tofile(f"{d}/{name}.bin")


# The gated delta rule
q, k = load("q", B, S, Hk, dk), load("k", B, S, Hk, dk)
v, dout = load("v", B, S, Hv, dv), load("dout", B, S, Hv, dv)
g, beta = load("g", B, S, Hv), load("beta", B, S, Hv)
s0, dfinal = load("s0", B, Hv, dk, dv), load("dfinal", B, Hv, dk, dv)
chunk_rule = function(f64, m, "torch_chunk_gated_delta_rule")
o, fin = chunk_rule(q, k, v, g=g, beta=beta, chunk_size=chunk, initial_state=s0,
                    output_final_state=True, use_qk_l2norm_in_kernel=True)
assert o.dtype == torch.float64 and fin.dtype == torch.float64
((o * dout.detach()).sum() + (fin * dfinal.detach()).sum()).backward()
for name, t in [("o", o), ("fin", fin), ("dq", q.grad), ("dk", k.grad), ("dv", v.grad),
                ("dg", g.grad), ("dbeta", beta.grad), ("ds0", s0.grad)]:
    save(name, t)

# The causal depthwise conv1d with SiLU: the layer's Conv1d has bias=False
cx, cdy, cw = load("cx", B, S, Cc), load("cdy", B, S, Cc), load("cw", Cc, K)
cy = function(f64, m, "causal_conv1d_fn")(cx.transpose(1, 2), cw, None, activation="silu").transpose(1, 2)
(cy * cdy.detach()).sum().backward()
save("cy", cy)
save("cdx", cx.grad)
save("cdw", cw.grad)

# The gated RMSNorm
nx, nz, ndy, nw = load("nx", T, D), load("nz", T, D), load("ndy", T, D), load("nw", D)
norm = m.Qwen3_5RMSNormGated(D, eps=eps).double()
with torch.no_grad():
    norm.weight.copy_(nw)
norm_forward = method(f64, m, m.Qwen3_5RMSNormGated, "forward")
ny = norm_forward(norm, nx, nz)
(ny * ndy.detach()).sum().backward()
save("ny", ny)
save("ndx", nx.grad)
save("ndz", nz.grad)
save("ndw", norm.weight.grad)
