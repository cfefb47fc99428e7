#!/usr/bin/env python3
"""Optimizer step benchmark, side by side in one run, same threads (issue 5, section 6).

Runs bench/optimizer_bench (our fused 8-bit AdamW, our fp32 AdamW, a STREAM-like triad)
and the Python peers -- DeepSpeed CPUAdam, torch.optim.AdamW (foreach, fused), torchao
AdamW8bit -- in interleaved rounds, then prints medians and the RESULT line.

Clipping as each system does it: ours takes the clip factor from the squared norms summed
during backward (clip_decision + a scalar in the fused pass: no extra memory traffic); every
peer runs torch.nn.utils.clip_grad_norm_ (a norm pass over all gradients plus a scale pass),
as DeepSpeed's and torch's trainers do.

Effective GB/s counts the bytes each system's step must move (reads + writes once) plus,
for the peers, their clip passes (norm: read g; scale: read + write g = 12 B/param):
  ours8: p r/w 8 + g 4 + m/v codes r/w 4 + absmax 0.06 + bf16 copy 2 = 18.06 B/param
  fp32 AdamW (ours32, DeepSpeed, torch): p, m, v r/w 24 + g 4 = 28 (+12 clip for peers)
  torchao AdamW8bit: p r/w 8 + g 4 + codes r/w 4 + absmax ~0.06 = 16.06 (+12 clip)

usage: .venv/bin/python bench/optimizer_bench.py [--bin build/bench/optimizer_bench]
         [--params 33554432] [--tensors 8] [--threads 2] [--rounds 5] [--reps 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = ["deepspeed", "torch_foreach", "torch_fused", "torchao8"]
PEER_BYTES = {"deepspeed": 28 + 12, "torch_foreach": 28 + 12, "torch_fused": 28 + 12, "torchao8": 16.06 + 12}


def worker(name, params, tensors, threads, reps):
    """Runs one peer; prints '<name> <seconds> <params> <bytes>' per timed step."""
    import torch
    torch.set_num_threads(threads)
    per = params // tensors
    ps = [torch.nn.Parameter(torch.randn(per) * 0.01) for _ in range(tensors)]
    grads = [torch.randn(per) * 1e-3 for _ in range(tensors)]
    kw = dict(lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if name == "deepspeed":
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam(ps, adamw_mode=True, **kw)
    elif name == "torch_foreach":
        opt = torch.optim.AdamW(ps, foreach=True, **kw)
    elif name == "torch_fused":
        opt = torch.optim.AdamW(ps, fused=True, **kw)
    elif name == "torchao8":
        from torchao.optim import AdamW8bit
        opt = AdamW8bit(ps, block_size=256, **kw)
    else:
        raise SystemExit("unknown peer " + name)
    for r in range(-2, reps):  # two warm-up steps: JIT builds, torch.compile, first touch
        for p, g in zip(ps, grads):
            p.grad = g.clone() if r < 0 else g  # same gradient each step
        t0 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(ps, 1.0, foreach=True)
        opt.step()
        s = time.perf_counter() - t0
        if r >= 0:
            print(f"{name} {s:.6f} {per * tensors} {PEER_BYTES[name] * per * tensors:.0f}", flush=True)
        # clip_grad_norm_ scaled g in place; restore it for the next step
        for g in grads:
            g.mul_(1.0)


def parse(lines, out):
    for line in lines.splitlines():
        f = line.split()
        if len(f) == 4 and f[0] != "state_bytes_per_param":
            out.setdefault(f[0], []).append((float(f[1]), int(f[2]), float(f[3])))
        elif len(f) == 3 and f[0] == "state_bytes_per_param":
            out["state_bytes_per_param " + f[1]] = float(f[2])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=None)
    ap.add_argument("--params", type=int, default=1 << 25)
    ap.add_argument("--tensors", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peer-timeout", type=int, default=900)
    ap.add_argument("--worker", default=None)
    ap.add_argument("--omp-wait-policy", default="PASSIVE", choices=["PASSIVE", "ACTIVE"])
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.params, a.tensors, a.threads, a.reps)
        return
    binary = a.bin
    if binary is None:
        for cand in ("build/bench/optimizer_bench", "build-optim/bench/optimizer_bench"):
            if os.path.exists(os.path.join(ROOT, cand)):
                binary = os.path.join(ROOT, cand)
                break
    if binary is None or not os.path.exists(binary):
        raise SystemExit("optimizer_bench binary not found: build it (cmake --build build) or pass --bin")
    common = ["--params", str(a.params), "--tensors", str(a.tensors), "--threads", str(a.threads), "--reps", str(a.reps)]
    results, failed = {}, {}
    # Same OpenMP settings for every system. PASSIVE: idle team threads sleep instead of
    # spinning; on a shared, oversubscribed host a spinning barrier can stall a parallel
    # region for a whole scheduler slice (measured here: 2 threads 20x slower than 1).
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY=a.omp_wait_policy)
    for rnd in range(a.rounds):
        r = subprocess.run([binary] + common, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise SystemExit("optimizer_bench failed:\n" + r.stdout + r.stderr)
        parse(r.stdout, results)
        for peer in PEERS:
            if peer in failed:
                continue
            try:
                r = subprocess.run([sys.executable, __file__, "--worker", peer] + common, capture_output=True,
                                   text=True, env=env, timeout=a.peer_timeout)
                if r.returncode != 0:
                    failed[peer] = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
                parse(r.stdout, results)
            except subprocess.TimeoutExpired:
                failed[peer] = f"timed out after {a.peer_timeout} s"
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr, flush=True)

    med = {}
    print(f"optimizer step, {a.params} params in {a.tensors} tensors, {a.threads} threads, "
          f"OMP_WAIT_POLICY={a.omp_wait_policy}, {a.rounds} rounds x {a.reps} steps, medians")
    print(f"{'system':<16}{'s/step':>10}{'Mparams/s':>12}{'GB/s':>8}")
    for name in ["ours8", "ours8_bf16g", "ours32"] + PEERS + ["triad"]:
        if name not in results:
            print(f"{name:<16} did not run: {failed.get(name, 'no result')}")
            continue
        s = statistics.median(t for t, _, _ in results[name])
        n = results[name][0][1]
        b = results[name][0][2]
        med[name] = (s, n / s, b / s / 1e9)
        print(f"{name:<16}{s:>10.4f}{n / s / 1e6:>12.1f}{b / s / 1e9:>8.2f}")
    for peer, why in failed.items():
        print(f"note: {peer} failed: {why}")
    ratio = med["ours8"][1] / med["deepspeed"][1] if "deepspeed" in med else float("nan")
    frac = med["ours8"][2] / med["triad"][2]
    sbp = results.get("state_bytes_per_param ours8", float("nan"))
    for peer in ["torch_foreach", "torch_fused", "torchao8"]:
        if peer in med:
            print(f"ours8 vs {peer}: {med['ours8'][1] / med[peer][1]:.2f}x params/s")
    if "ours32" in med and "deepspeed" in med:
        print(f"ours32 vs deepspeed: {med['ours32'][1] / med['deepspeed'][1]:.2f}x params/s")
    print(f"RESULT optimizer ours8_vs_deepspeed={ratio:.2f} ours8_bw_frac={frac:.2f} state_bytes_per_param={sbp:.2f}")


if __name__ == "__main__":
    main()
