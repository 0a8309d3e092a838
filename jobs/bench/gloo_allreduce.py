#!/usr/bin/env python3
"""The gloo side of jobs/bench/compare.sh's allreduce rows: torch.distributed.all_reduce (sum,
float32, CPU tensors) of every size from --min-bytes to --max-bytes, times 4 each step, timed as
`hpctrain bench comm` times its communicator: 5 untimed warm-up calls, then --iters timed ones
one after another, the mean per call averaged over ranks; algbw = bytes / time and
busbw = algbw * 2(n-1)/n, in GB/s. Checks each size's sum.

Prints on rank 0 one line per size: bytes, time in microseconds, algbw, busbw.

usage: /usr/bin/python3 jobs/bench/torchrun.py --nproc_per_node=2 jobs/bench/gloo_allreduce.py
         [--min-bytes 4096] [--max-bytes 268435456] [--iters 20]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist

WARMUP = 5


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-bytes", type=int, default=4096)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    bus_factor = 2.0 * (world - 1) / world
    size = args.min_bytes
    while size <= args.max_bytes:
        tensor = torch.zeros(size // 4, dtype=torch.float32)
        for _ in range(WARMUP):
            dist.all_reduce(tensor)
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(tensor)
        seconds = torch.tensor([(time.perf_counter() - start) / args.iters], dtype=torch.float64)
        dist.all_reduce(seconds)
        seconds = seconds.item() / world
        tensor.fill_(rank + 1)
        dist.all_reduce(tensor)
        if not bool(tensor.eq(world * (world + 1) / 2).all()):
            raise SystemExit(f"gloo_allreduce: wrong sum at {size} bytes")
        if rank == 0:
            algbw = size / seconds / 1e9
            print(f"{size} {seconds * 1e6:.1f} {algbw:.3f} {algbw * bus_factor:.3f}", flush=True)
        size *= 4
    dist.barrier()
    # As in ddp_reference.py: gloo's teardown in PyTorch 1.13 sometimes never returns at exit.
    os._exit(0)


if __name__ == "__main__":
    main()
