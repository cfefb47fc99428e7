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

Bandwidth: ours8_bw_frac divides ours8's GB/s by the triad's, a[i] = b[i] + s * c[i] with
non-temporal stores on the same threads (12 B/element, counted as STREAM counts). The
ordinary-store triad (triad_cached, printed beside it) also reads every line of a before
writing it, so 16 bytes move per 12 counted and it understates the attainable bandwidth
(ours32, which moves no uncounted bytes, outran it by ~1.8x on a 2-vCPU EPYC).

ISA: LT_CPU=scalar|avx2|avx512|native caps our kernels (the binary prints the level and
kernel variant it ran). For a fair comparison the peers get the same cap: torch through
ATEN_CPU_CAPABILITY (default / avx2), DeepSpeed by building its CPUAdam with -march=x86-64-v3
-D__AVX256__ (avx2) or -D__SCALAR__ (scalar) instead of its -march=native and widest SIMD,
in a JIT cache of its own per level. Without a cap every system uses the CPU's best.

usage: [LT_CPU=avx2] .venv/bin/python bench/optimizer_bench.py [--bin build/bench/optimizer_bench]
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


def isa_cap():
    """LT_CPU's cap as the peers understand it: None (no cap), 'avx2' or 'scalar'."""
    cap = os.environ.get("LT_CPU", "native").strip().lower()
    return cap if cap in ("avx2", "scalar") else None


def peer_env(env):
    """The peers' environment under LT_CPU's cap (see the module docstring)."""
    cap = isa_cap()
    env = dict(env)
    if cap:
        env["ATEN_CPU_CAPABILITY"] = "avx2" if cap == "avx2" else "default"
    if "TORCH_EXTENSIONS_DIR" not in env:  # DeepSpeed's JIT build, one per cap
        env["TORCH_EXTENSIONS_DIR"] = os.path.expanduser(
            os.path.join("~", ".cache", "torch_extensions", "lazytrain_bench_" + (cap or "native")))
    return env


def cap_deepspeed_build():
    """Makes DeepSpeed's op builder target LT_CPU's cap; returns the flags it builds with."""
    from deepspeed.ops.op_builder import CPUAdamBuilder
    from deepspeed.ops.op_builder.builder import OpBuilder
    cap = isa_cap()
    if cap == "avx2":
        OpBuilder.cpu_arch = lambda self: "-march=x86-64-v3"
        OpBuilder.simd_width = lambda self: "-D__AVX256__"
    elif cap == "scalar":
        OpBuilder.cpu_arch = lambda self: "-march=x86-64-v2"
        OpBuilder.simd_width = lambda self: "-D__SCALAR__"
    b = CPUAdamBuilder()
    return f"{b.cpu_arch()} {b.simd_width()}"


def worker(name, params, tensors, threads, reps):
    """Runs one peer; prints '<name> <seconds> <params> <bytes>' per timed step."""
    import torch
    torch.set_num_threads(threads)
    print(f"info {name} torch cpu capability {torch.backends.cpu.get_cpu_capability()}", flush=True)
    per = params // tensors
    ps = [torch.nn.Parameter(torch.randn(per) * 0.01) for _ in range(tensors)]
    grads = [torch.randn(per) * 1e-3 for _ in range(tensors)]
    kw = dict(lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if name == "deepspeed":
        print(f"info {name} builds with {cap_deepspeed_build()}", flush=True)
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


def parse(lines, out, info):
    for line in lines.splitlines():
        f = line.split()
        if f and f[0] == "info":
            info.setdefault(" ".join(f[1:]), None)  # ordered set of distinct info lines
        elif len(f) == 4 and f[0] != "state_bytes_per_param":
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
    results, failed, info = {}, {}, {}
    # Same OpenMP settings for every system. PASSIVE: idle team threads sleep instead of
    # spinning; on a shared, oversubscribed host a spinning barrier can stall a parallel
    # region for a whole scheduler slice (measured here: 2 threads 20x slower than 1).
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OMP_WAIT_POLICY=a.omp_wait_policy)
    for rnd in range(a.rounds):
        r = subprocess.run([binary] + common, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            raise SystemExit("optimizer_bench failed:\n" + r.stdout + r.stderr)
        parse(r.stdout, results, info)
        for peer in PEERS:
            if peer in failed:
                continue
            try:
                r = subprocess.run([sys.executable, __file__, "--worker", peer] + common, capture_output=True,
                                   text=True, env=peer_env(env), timeout=a.peer_timeout)
                if r.returncode != 0:
                    failed[peer] = (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
                parse(r.stdout, results, info)
            except subprocess.TimeoutExpired:
                failed[peer] = f"timed out after {a.peer_timeout} s"
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr, flush=True)

    med = {}
    print(f"optimizer step, {a.params} params in {a.tensors} tensors, {a.threads} threads, "
          f"OMP_WAIT_POLICY={a.omp_wait_policy}, {a.rounds} rounds x {a.reps} steps, medians")
    for line in info:
        print(line)
    # B/param: the bytes each step must move per parameter (module docstring), which with
    # the triad's GB/s bounds params/s: the memory limit the ratios are read against.
    print(f"{'system':<16}{'s/step':>10}{'Mparams/s':>12}{'GB/s':>8}{'B/param':>9}")
    for name in ["ours8", "ours8_bf16g", "ours32"] + PEERS + ["triad", "triad_cached"]:
        if name not in results:
            print(f"{name:<16} did not run: {failed.get(name, 'no result')}")
            continue
        s = statistics.median(t for t, _, _ in results[name])
        n = results[name][0][1]
        b = results[name][0][2]
        med[name] = (s, n / s, b / s / 1e9)
        print(f"{name:<16}{s:>10.4f}{n / s / 1e6:>12.1f}{b / s / 1e9:>8.2f}{b / n:>9.2f}")
    for peer, why in failed.items():
        print(f"note: {peer} failed: {why}")
    ratio = med["ours8"][1] / med["deepspeed"][1] if "deepspeed" in med else float("nan")
    frac = med["ours8"][2] / med["triad"][2]
    sbp = results.get("state_bytes_per_param ours8", float("nan"))
    for peer in ["torch_foreach", "torch_fused", "torchao8"]:
        if peer in med:
            print(f"ours8 vs {peer}: {med['ours8'][1] / med[peer][1]:.2f}x params/s")
    if "ours32" in med and "triad_cached" in med:
        print(f"ours32 moved {med['ours32'][2]:.1f} GB/s: {med['ours32'][2] / med['triad'][2]:.2f} of the triad, "
              f"{med['ours32'][2] / med['triad_cached'][2]:.2f} of triad_cached")
    if "ours32" in med and "deepspeed" in med:
        print(f"ours32 vs deepspeed: {med['ours32'][1] / med['deepspeed'][1]:.2f}x params/s")
    fused = med["ours8"][1] / med["torch_fused"][1] if "torch_fused" in med else float("nan")
    isa = next((line.split()[-1] for line in info if line.startswith("kernels ours8 ")), "unknown")
    print(f"RESULT optimizer ours8_vs_deepspeed={ratio:.2f} ours8_vs_torch_fused={fused:.2f} ours8_bw_frac={frac:.2f} "
          f"state_bytes_per_param={sbp:.2f} isa={isa}")


if __name__ == "__main__":
    main()
