#!/usr/bin/env python3
"""The PyTorch peer of `lazytrain bench dp` (issue 29): the same from-scratch training
steps, on the same model (the config.json of the bench's one-process checkpoint), the same
global batch, sequence length, step count and threads in all, run as PyTorch users run data
parallelism on CPUs: torch.distributed over gloo, DistributedDataParallel, and
torch.optim.AdamW, whole on every rank (unsharded) or sharded over the ranks with
ZeroRedundancyOptimizer (sharded, ZeRO stage 1: lazytrain's --shard-optimizer on).
bf16 runs under CPU autocast, as lazytrain's default precision computes in bf16.

Timing as lazytrain's summary counts it: tokens of all steps over the wall time of all
steps (the first step's warm-up included in both), on rank 0.

usage: dp_peer.py --config CONFIG_JSON --batch B --seq S --steps N --ranks R --threads T
                  [--sharded] [--precision bf16|f32]
Prints one JSON line: {"tokens_per_s": ..., "ranks": R, "sharded": ..., "optimizer_state_bytes": ...}
(optimizer_state_bytes: what rank 0's optimizer holds).
"""
import argparse
import json
import os
import socket
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(rank, a, port, out_path):
    import torch
    import torch.distributed as dist
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(a.threads)
    distributed = a.ranks > 1
    if distributed:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    torch.manual_seed(0)  # every rank builds the same weights (DDP checks it)
    with open(a.config) as f:
        config = LlamaConfig(**json.load(f))
    model = LlamaForCausalLM(config)
    model.train()
    net = model
    if distributed:
        from torch.nn.parallel import DistributedDataParallel
        net = DistributedDataParallel(model)
    hyper = dict(lr=2e-3, weight_decay=0.01)
    if distributed and a.sharded:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, **hyper)
    else:
        opt = torch.optim.AdamW(model.parameters(), **hyper)
    rows = a.batch // a.ranks
    g = torch.Generator().manual_seed(1000 + rank)
    batches = [torch.randint(0, config.vocab_size, (rows, a.seq), generator=g) for _ in range(a.steps)]
    if distributed:
        dist.barrier()
    t0 = time.perf_counter()
    for ids in batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = net(input_ids=ids, labels=ids).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    if distributed:
        dist.barrier()
    seconds = time.perf_counter() - t0
    if rank == 0:
        local = opt.optim if distributed and a.sharded else opt
        state = sum(t.numel() * t.element_size() for s in local.state.values() for t in s.values()
                    if torch.is_tensor(t))
        with open(out_path, "w") as f:
            json.dump({"tokens_per_s": a.batch * a.seq * a.steps / seconds, "ranks": a.ranks, "sharded": a.sharded,
                       "optimizer_state_bytes": state, "final_loss": float(loss.detach())}, f)
    if distributed:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--sharded", action="store_true")
    ap.add_argument("--precision", choices=["bf16", "f32"], default="bf16")
    a = ap.parse_args()
    if a.batch % a.ranks != 0:
        raise SystemExit(f"--batch {a.batch} is not a multiple of --ranks {a.ranks}")
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        out_path = os.path.join(tmp, "result.json")
        if a.ranks == 1:
            run_rank(0, a, 0, out_path)
        else:
            try:
                mp.spawn(run_rank, args=(a, free_port(), out_path), nprocs=a.ranks, join=True)
            except mp.ProcessExitedException as e:
                # Seen now and then: a rank aborts in gloo's teardown ("terminate called without
                # an active exception") after the last barrier. Rank 0 writes its result only
                # past that barrier, so a result on disk is a whole run; without one, fail.
                if not os.path.exists(out_path):
                    raise
                print(f"dp_peer: a rank died after the timed steps ({e}); the timing stands", file=sys.stderr)
        with open(out_path) as f:
            print(f.read())


if __name__ == "__main__":
    main()
