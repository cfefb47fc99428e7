"""The CUDA kernels beside PyTorch's on the same GPU, at the shapes of one 8B-class layer
(4096 tokens): runs cuda_kernels_bench (ours) and times PyTorch's kernels for the same work
the same way (CUDA events, median of ROUNDS after warm-up), then prints each time ratio
(ours / PyTorch: above 1 is slower) and a RESULT line.

Peers: torch.matmul in bf16 (its result bf16; ours fp32); scaled_dot_product_attention, causal, grouped-query, in fp32
(the precision of our kernel) and in bf16 (the flash kernels, beside our bf16 tensor-core ones);
RMSNorm as torch ops under autograd, fp32; transformers' torch_chunk_gated_delta_rule
(chunk 64, q/k l2norm in the kernel) and causal_conv1d_fn, fp32, where the installed
transformers has Qwen3.5 (else those peers are reported missing, not guessed).

usage: cuda_kernels_bench.py --binary PATH [--rounds N]
"""
import argparse
import subprocess
import sys

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--binary", required=True)
ap.add_argument("--rounds", type=int, default=10)
args = ap.parse_args()
torch.manual_seed(0)
dev = "cuda"


def median_ms(fn):
    for _ in range(2):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(args.rounds):
        a.record()
        fn()
        b.record()
        b.synchronize()
        ms.append(a.elapsed_time(b))
    ms.sort()
    return ms[len(ms) // 2]


def fwd_bwd_ms(make, forward):
    """Median forward and backward times of forward(*make()) under autograd."""
    inputs = make()
    out = forward(*inputs)
    grad = torch.randn_like(out)
    f = median_ms(lambda: forward(*inputs))

    def backward():
        o = forward(*inputs)
        torch.cuda.synchronize()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        o.backward(grad)
        t1.record()
        t1.synchronize()
        for x in inputs:
            x.grad = None
        return t0.elapsed_time(t1)

    for _ in range(2):
        backward()
    times = sorted(backward() for _ in range(args.rounds))
    return f, times[len(times) // 2]


ours_line = subprocess.run([args.binary, str(args.rounds)], check=True, capture_output=True, text=True).stdout
print(ours_line.strip(), flush=True)
ours = dict(kv.split("=") for kv in ours_line.split()[1:])
ours = {k: float(v) for k, v in ours.items()}

peer = {}
M, K, N = 4096, 4096, 14336
a = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
w = torch.randn(N, K, device=dev, dtype=torch.bfloat16)
# torch writes a bf16 result, ours an fp32 one (twice the bytes out): the same products.
peer["gemm_ms"] = median_ms(lambda: torch.matmul(a, w.t()))
peer["gemm_tflops"] = 2 * M * N * K / (peer["gemm_ms"] * 1e-3) / 1e12

S, Hq, Hkv, D = 4096, 32, 8, 128
for tag, dt in (("", torch.float32), ("_bf16", torch.bfloat16)):
    make = lambda: (torch.randn(1, Hq, S, D, device=dev, dtype=dt, requires_grad=True),
                    torch.randn(1, Hkv, S, D, device=dev, dtype=dt, requires_grad=True),
                    torch.randn(1, Hkv, S, D, device=dev, dtype=dt, requires_grad=True))
    attn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    peer[f"attn_fwd_ms{tag}"], peer[f"attn_bwd_ms{tag}"] = fwd_bwd_ms(make, attn)

T, C = 4096, 4096
rms_w = torch.randn(C, device=dev, requires_grad=True)
rms = lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * rms_w
peer["rms_fwd_ms"], peer["rms_bwd_ms"] = fwd_bwd_ms(lambda: (torch.randn(T, C, device=dev, requires_grad=True),), rms)

try:
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    Hk, Hv, dk, dv = 16, 32, 128, 128

    def make_rule():
        return (torch.randn(1, S, Hk, dk, device=dev, requires_grad=True),
                torch.randn(1, S, Hk, dk, device=dev, requires_grad=True),
                torch.randn(1, S, Hv, dv, device=dev, requires_grad=True),
                (-torch.rand(1, S, Hv, device=dev)).requires_grad_(),
                torch.rand(1, S, Hv, device=dev, requires_grad=True))

    def rule(q, k, v, g, beta):
        # Qwen3.5 repeats the key heads for the value heads before the kernel.
        q = q.repeat_interleave(Hv // Hk, dim=2)
        k = k.repeat_interleave(Hv // Hk, dim=2)
        o, _ = m.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, chunk_size=64, use_qk_l2norm_in_kernel=True)
        return o

    peer["gdr_fwd_ms"], peer["gdr_bwd_ms"] = fwd_bwd_ms(make_rule, rule)
    Cc = 2 * Hk * dk + Hv * dv
    conv_w = torch.randn(Cc, 4, device=dev, requires_grad=True)
    conv = lambda x: m.causal_conv1d_fn(x, conv_w, None, activation="silu") if m.causal_conv1d_fn else \
        F.silu(F.conv1d(x, conv_w.unsqueeze(1), padding=3, groups=Cc)[..., :S])
    peer["conv_fwd_ms"], peer["conv_bwd_ms"] = fwd_bwd_ms(
        lambda: (torch.randn(1, Cc, S, device=dev, requires_grad=True),), conv)
except Exception as e:  # an older transformers without Qwen3.5: say so
    print(f"no Gated DeltaNet peer: {type(e).__name__}: {e}", flush=True)

print("PEER " + " ".join(f"{k}={v:.3f}" for k, v in peer.items()), flush=True)
print(f"{'kernel':<14}{'ours ms':>10}{'torch ms':>10}{'ratio':>8}")
ratios = {}
for key in ["gemm_ms", "attn_fwd_ms", "attn_bwd_ms", "rms_fwd_ms", "rms_bwd_ms", "gdr_fwd_ms", "gdr_bwd_ms",
            "conv_fwd_ms", "conv_bwd_ms"]:
    if key in ours and key in peer:
        ratios[key] = ours[key] / peer[key]
        print(f"{key[:-3]:<14}{ours[key]:>10.3f}{peer[key]:>10.3f}{ratios[key]:>8.2f}")
if "attn_fwd_ms_bf16" in peer:
    for part in ("fwd", "bwd"):
        r = ours[f"attn_{part}_ms"] / peer[f"attn_{part}_ms_bf16"]
        ratios[f"attn_{part}_vs_bf16_flash"] = r
        print(f"attn {part} vs torch bf16: {r:.2f}")
    for part in ("fwd", "bwd"):  # our tensor-core kernels against torch's bf16 flash kernels
        if f"attn_{part}_bf16_ms" in ours:
            r = ours[f"attn_{part}_bf16_ms"] / peer[f"attn_{part}_ms_bf16"]
            ratios[f"attn_{part}_tc_vs_bf16_flash"] = r
            print(f"attn {part} (ours, tensor cores) vs torch bf16: {r:.2f}")
print("RESULT cuda_kernels " + " ".join(f"{k.replace('_ms', '')}_ratio={v:.2f}" for k, v in ratios.items())
      + f" gemm_tflops={ours['gemm_tflops']:.0f} device={torch.cuda.get_device_name().replace(' ', '_')}")
