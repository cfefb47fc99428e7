#!/usr/bin/env python3
"""Benchmark (not a test): one whole training step (forward + backward, no optimizer) of a
~110M-parameter Llama shape (or, with --family qwen3_5, a ~127M Qwen3.5 hybrid: three
Gated DeltaNet layers to each gated full-attention one; with --family qwen3_moe, a ~102M
qwen3_moe: 8 experts, 2 per token), lazytrain against PyTorch on the
same transformers model, in fp32 and in bf16 (PyTorch: CPU autocast), with the same thread
count, in one run. PyTorch runs transformers' own Qwen3.5 code; without the
flash-linear-attention and causal-conv1d packages (CUDA-only) that is its torch fallback,
the chunked delta rule in plain torch ops, which the ratio line names.

Each configuration runs in its own process (so peak RSS is its own), and the rounds are
interleaved, ours then PyTorch's, because this machine is shared and noisy: figures are
medians over rounds, and the comparison is a ratio measured side by side.

usage: .venv/bin/python bench/train_step_bench.py [--build build] [--rounds 3] [--steps 3] [--family qwen3_5|qwen3_moe]
       [--peer-timeout 1200]
Last line: RESULT train_step bf16_ratio=... fp32_ratio=... mfu=... rss_ratio=... isa=... family=...

LT_CPU=avx2 (or scalar) caps our kernels and oneDNN at that level; PyTorch is capped the
same way in the same run (ATEN_CPU_CAPABILITY; its oneDNN through ONEDNN_MAX_CPU_ISA), so
the ratio compares like with like on an AVX-512 machine standing in for an AVX2 one.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

SHAPE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
             num_key_value_heads=4, intermediate_size=2048, vocab_size=32000,
             max_position_embeddings=1024)
# Qwen3.6-27B's proportions at ~127M (126.6M; the 32000 x 768 embedding and head are
# untied): layer pattern 3 DeltaNet : 1 attention, 16 key heads
# of 128 shared by 2x value heads in the DeltaNet (here 4 key / 8 value heads of 64), head_dim
# 256 with a quarter rotated (here 128), 4 KV heads.
QWEN3_5_SHAPE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=6, num_key_value_heads=2,
                     head_dim=128, intermediate_size=2048, vocab_size=32000, max_position_embeddings=1024,
                     linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64,
                     linear_value_head_dim=64, linear_conv_kernel_dim=4, full_attention_interval=4,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                                      "partial_rotary_factor": 0.25})

# A qwen3_moe at ~102M (102.0M: the 32000 x 512 embedding and head, untied, are 32.8M):
# 8 sparse layers of 8 experts 640 wide, 2 per token, renormalized as Qwen3-30B-A3B does,
# q/k norms, 8 heads of 64 over 4 KV heads.
QWEN3_MOE_SHAPE = dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=4,
                       head_dim=64, intermediate_size=1536, moe_intermediate_size=640, num_experts=8,
                       num_experts_per_tok=2, norm_topk_prob=True, vocab_size=32000, max_position_embeddings=1024,
                       tie_word_embeddings=False)


def torch_worker(model_dir, mode, batch, seq, steps, threads):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.train()
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=g)
    times = []
    for s in range(steps + 1):  # first step warms up
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=False)
        if mode == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        else:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        if s > 0:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    print(json.dumps({"step_s": step_s, "tokens_per_s": batch * seq / step_s,
                      "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "loss": float(loss), "threads": torch.get_num_threads()}))


# LT_CPU level -> PyTorch's own caps for its kernels and for its bundled oneDNN.
TORCH_CAPS = {"avx2": ("avx2", "AVX2"), "scalar": ("default", "SSE41")}


def peer_env(env):
    cap = TORCH_CAPS.get(os.environ.get("LT_CPU", ""))
    if cap is None:
        return env
    return dict(env, ATEN_CPU_CAPABILITY=cap[0], ONEDNN_MAX_CPU_ISA=cap[1], DNNL_MAX_CPU_ISA=cap[1])


def run_json(cmd, env, timeout=None):
    """The worker's last stdout line as JSON; None when it ran past `timeout` seconds."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        sys.exit(f"benchmark worker failed: {' '.join(cmd)}\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--worker", choices=["torch"])
    ap.add_argument("--mode", choices=["f32", "bf16"])
    ap.add_argument("--model-dir")
    ap.add_argument("--family", choices=["llama", "qwen3_5", "qwen3_moe"], default="llama")
    ap.add_argument("--peer-timeout", type=float, default=1200,
                    help="seconds a PyTorch worker may run (model load and warm-up included); one that runs "
                         "longer is stopped, its rate bounded by steps x tokens / timeout, and the ratio "
                         "reported as a lower bound (seen: bf16 autocast under LT_CPU=avx2)")
    a = ap.parse_args()
    if a.worker == "torch":
        return torch_worker(a.model_dir, a.mode, a.batch, a.seq, a.steps, a.threads)

    import torch
    from transformers import (LlamaConfig, LlamaForCausalLM, Qwen3_5ForCausalLM, Qwen3_5TextConfig, Qwen3MoeConfig,
                              Qwen3MoeForCausalLM)
    ours_bin = os.path.join(a.build, "bench", "train_step_bench")
    if not os.path.exists(ours_bin):
        sys.exit(f"{ours_bin} not found: build first (bash scripts/setup.sh)")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), LT_THREADS=str(a.threads))
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        if a.family == "qwen3_5":
            shape, model = QWEN3_5_SHAPE, Qwen3_5ForCausalLM(Qwen3_5TextConfig(**QWEN3_5_SHAPE))
        elif a.family == "qwen3_moe":
            shape, model = QWEN3_MOE_SHAPE, Qwen3MoeForCausalLM(Qwen3MoeConfig(**QWEN3_MOE_SHAPE))
        else:
            shape, model = SHAPE, LlamaForCausalLM(LlamaConfig(**SHAPE))
        n_params = sum(p.numel() for p in model.parameters())
        model.save_pretrained(tmp, safe_serialization=True)
        del model
        print(f"model: {a.family} {shape}, {n_params / 1e6:.1f}M parameters; batch {a.batch}, "
              f"seq {a.seq}; {a.threads} threads; {a.rounds} rounds x {a.steps} steps")
        results = {(who, mode): [] for who in ("lazytrain", "pytorch") for mode in ("f32", "bf16")}
        timed_out = set()  # the modes where a PyTorch worker ran past --peer-timeout
        gemm = []
        for r in range(a.rounds):
            gemm.append(run_json([ours_bin, tmp, "bf16", str(a.batch), str(a.seq), "5", "gemm"], env))
            for mode in ("f32", "bf16"):
                results[("lazytrain", mode)].append(run_json(
                    [ours_bin, tmp, mode, str(a.batch), str(a.seq), str(a.steps)], env))
                peer = run_json(
                    [sys.executable, __file__, "--worker", "torch", "--mode", mode,
                     "--model-dir", tmp, "--batch", str(a.batch), "--seq", str(a.seq),
                     "--steps", str(a.steps), "--threads", str(a.threads)], peer_env(env), a.peer_timeout)
                if peer is None:
                    # It did not finish `steps` steps in the time: its rate is below this bound.
                    print(f"  round {r + 1} {mode}: pytorch did not finish {a.steps} steps in {a.peer_timeout:.0f} s",
                          flush=True)
                    timed_out.add(mode)
                    peer = {"tokens_per_s": a.steps * a.batch * a.seq / a.peer_timeout,
                            "step_s": a.peer_timeout / a.steps, "peak_rss": float("nan")}
                results[("pytorch", mode)].append(peer)
                print(f"  round {r + 1} {mode}: lazytrain {results[('lazytrain', mode)][-1]['tokens_per_s']:.0f} tok/s, "
                      f"pytorch {results[('pytorch', mode)][-1]['tokens_per_s']:.0f} tok/s", flush=True)

    med = {k: {f: statistics.median(x[f] for x in v) for f in ("tokens_per_s", "peak_rss", "step_s")}
           for k, v in results.items()}
    gemm_rate = statistics.median(g["gemm_bf16_gflops"] for g in gemm) * 1e9
    flops = results[("lazytrain", "bf16")][0]["model_flops_per_step"]
    print(f"\n{'system':<10} {'mode':<5} {'tokens/s':>10} {'step s':>8} {'peak RSS GB':>12}")
    for (who, mode), m in sorted(med.items()):
        print(f"{who:<10} {mode:<5} {m['tokens_per_s']:>10.1f} {m['step_s']:>8.3f} {m['peak_rss'] / 1e9:>12.2f}")
    bf16_ratio = med[("lazytrain", "bf16")]["tokens_per_s"] / med[("pytorch", "bf16")]["tokens_per_s"]
    fp32_ratio = med[("lazytrain", "f32")]["tokens_per_s"] / med[("pytorch", "f32")]["tokens_per_s"]
    mfu = flops / med[("lazytrain", "bf16")]["step_s"] / gemm_rate
    rss_ratio = med[("lazytrain", "bf16")]["peak_rss"] / med[("pytorch", "bf16")]["peak_rss"]
    print(f"bf16 GEMM rate measured in this run (oneDNN, {gemm[0]['impl']}): {gemm_rate / 1e9:.0f} GFLOP/s; "
          f"model FLOPs per step (3 x forward, attention included): {flops / 1e9:.1f} GFLOP")
    print(f"ours: {gemm[0]['cpu']}; PyTorch: {peer_env({}) or 'no cap'}")
    print(f"ours' bf16 GEMM path per layout (as `lazytrain train` takes it: this machine's profile, "
          f"profiles/local.json, else measured at startup, else the rule): {results[('lazytrain', 'bf16')][0].get('bf16_gemm')}")
    # A peer rate that is an upper bound (a timed-out worker) makes the ratio a lower bound,
    # since a median only moves down when one of its values does; the RESULT line says so.
    for mode in sorted(timed_out):
        print(f"PyTorch {mode}: a worker ran past {a.peer_timeout:.0f} s; its tokens/s above is an upper bound, "
              f"so the {mode} ratio is a lower bound (and its peak RSS unknown)")
    print(f"RESULT train_step bf16_ratio={bf16_ratio:.3f} fp32_ratio={fp32_ratio:.3f} "
          f"mfu={mfu:.3f} rss_ratio={rss_ratio:.3f} isa={gemm[0]['isa']} family={a.family}"
          + "".join(f" {'fp32' if m == 'f32' else m}_peer_timed_out=1" for m in sorted(timed_out)))


if __name__ == "__main__":
    main()
