"""Peer for bench/gated_deltanet_bench.cpp: transformers' torch path of the Qwen3.5 Gated
DeltaNet pieces (torch_chunk_gated_delta_rule with the in-kernel q/k l2norm, chunk 64;
causal_conv1d_fn with SiLU; Qwen3_5RMSNormGated), fp32, forward and backward (autograd),
at the same shape and thread count. Prints one line:
  PEER gdr_fwd_ms=... gdr_bwd_ms=... conv_fwd_ms=... conv_bwd_ms=... norm_fwd_ms=... norm_bwd_ms=...
(medians over ROUNDS).

usage: gated_deltanet_bench.py THREADS ROUNDS B S Hk Hv dk dv K
"""
import statistics
import sys
import time

import torch

from transformers.models.qwen3_5 import modeling_qwen3_5 as m

threads, rounds, B, S, Hk, Hv, dk, dv, K = map(int, sys.argv[1:10])
torch.set_num_threads(threads)
torch.manual_seed(0)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, (time.perf_counter() - t) * 1e3


def median_fwd_bwd(make_inputs, forward):
    fwd, bwd = [], []
    for _ in range(rounds):
        inputs = make_inputs()
        out, tf = timed(lambda: forward(*inputs))
        outs = out if isinstance(out, tuple) else (out,)
        loss = sum((o * torch.ones_like(o)).sum() for o in outs if o is not None)
        _, tb = timed(loss.backward)
        fwd.append(tf)
        bwd.append(tb)
    return statistics.median(fwd), statistics.median(bwd)


def rule_inputs():
    q = torch.randn(B, S, Hk, dk, requires_grad=True)
    k = torch.randn(B, S, Hk, dk, requires_grad=True)
    v = torch.randn(B, S, Hv, dv, requires_grad=True)
    g = (-torch.rand(B, S, Hv)).requires_grad_()
    beta = torch.rand(B, S, Hv, requires_grad=True)
    return q, k, v, g, beta


def rule(q, k, v, g, beta):
    o, _ = m.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, chunk_size=64,
                                          use_qk_l2norm_in_kernel=True)
    return o


C = 2 * Hk * dk + Hv * dv
conv_inputs = lambda: (torch.randn(B, C, S, requires_grad=True), torch.randn(C, K, requires_grad=True))
conv = lambda x, w: m.causal_conv1d_fn(x, w, None, activation="silu")
norm_module = m.Qwen3_5RMSNormGated(dv, eps=1e-6)
norm_inputs = lambda: (torch.randn(B * S * Hv, dv, requires_grad=True), torch.randn(B * S * Hv, dv, requires_grad=True))
norm = lambda x, z: norm_module(x, z)

r = median_fwd_bwd(rule_inputs, rule)
c = median_fwd_bwd(conv_inputs, conv)
n = median_fwd_bwd(norm_inputs, norm)
print(f"PEER gdr_fwd_ms={r[0]:.2f} gdr_bwd_ms={r[1]:.2f} conv_fwd_ms={c[0]:.2f} conv_bwd_ms={c[1]:.2f} "
      f"norm_fwd_ms={n[0]:.2f} norm_bwd_ms={n[1]:.2f}", flush=True)
