"""NCCL reference: all-reduce with `--ranks` processes sharing GPU 0 (run under MPS), through
torch.distributed's NCCL backend, timed with CUDA events like `oxccl perf`.

Prints one row per size (bytes per rank, powers of `--step` from --min to --max): median time
per operation over `--reps` repetitions of `--iters` back-to-back all-reduces, algbw and busbw
(nccl-tests' 2(n-1)/n factor). NVLink multicast stays off (NCCL_NVLS_ENABLE=0).

usage: python3 scripts/nccl-ref.py [--ranks 2] [--dtype f32] [--min 1M] [--max 128M] [--step 2]
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(s[:-1] if mul > 1 else s) * mul


def human(b):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return f"{b // m}{unit}"
    return str(b)


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), NCCL_NVLS_ENABLE="0")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=args.ranks, device_id=torch.device("cuda:0"))
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    esize = torch.tensor([], dtype=dtype).element_size()
    b = args.min
    if rank == 0:
        print(f"nccl {torch.cuda.nccl.version()} all_reduce sum {args.dtype}, {args.ranks} ranks on one GPU")
        print(f"{'bytes':>8} {'time(us)':>10} {'algbw':>8} {'busbw':>8}")
    while b <= args.max:
        x = torch.randn(b // esize, device="cuda", dtype=torch.float32).to(dtype)
        for _ in range(3):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.reps):
            dist.barrier()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(args.iters):
                dist.all_reduce(x)
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e3 / args.iters)
        t = torch.tensor([sorted(times)[len(times) // 2]], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if rank == 0:
            us = t.item()
            algbw = b / us / 1e3
            busbw = algbw * 2 * (args.ranks - 1) / args.ranks
            print(f"{human(b):>8} {us:10.2f} {algbw:8.2f} {busbw:8.2f}", flush=True)
        b *= args.step
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--dtype", default="f32")
    p.add_argument("--min", type=size, default=size("1M"))
    p.add_argument("--max", type=size, default=size("128M"))
    p.add_argument("--step", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(args, port), nprocs=args.ranks, start_method="spawn")


if __name__ == "__main__":
    sys.exit(main())
