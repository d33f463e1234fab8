"""NCCL reference: collectives through torch.distributed's NCCL backend, one process per
rank, timed with CUDA events like `oxccl perf`.

Rank r runs on GPU r % --gpus (default 1: every rank on GPU 0, run under MPS; torch's NCCL
2.28 refuses two ranks on one GPU with "Duplicate GPU detected", so several ranks need
--gpus equal to --ranks). For every collective (--colls: all_reduce, all_gather,
reduce_scatter), data type (--dtypes: f32, bf16, f16) and size (nccl-tests' size: bytes per
rank for all_reduce, the gathered output for all_gather, the scattered input for
reduce_scatter; from --min, times --step, to --max, rounded down to a multiple of ranks x
element size exactly as `oxccl perf` rounds), rank 0 prints one row: median time per
operation over --reps repetitions of --iters back-to-back operations (from --large-from on,
--large-reps x --large-iters; the slowest rank's median), algbw and busbw with nccl-tests' factors (all_reduce 2(n-1)/n, all_gather and
reduce_scatter (n-1)/n). --csv also writes the rows as `coll,dtype,ranks,bytes,time_us`.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and the PyTorch / NVSHMEM equivalents, also
in the spawned processes).

usage: python3 scripts/nccl-ref.py [--ranks 2] [--gpus 2] [--colls all_reduce,all_gather]
           [--dtypes f32,bf16] [--min 8] [--max 4G] [--step 2] [--iters 20] [--reps 5]
           [--large-from 32M --large-iters 5 --large-reps 3] [--csv out.csv]
"""
import argparse
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
COLLS = ("all_reduce", "all_gather", "reduce_scatter")


def size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(s[:-1] if mul > 1 else s) * mul


def human(b):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return f"{b // m}{unit}"
    return str(b)


def bus_factor(coll, n):
    if coll == "all_reduce":
        return 2 * (n - 1) / n
    return (n - 1) / n


def sizes(coll, n, esize, lo, hi, step):
    """(count per rank chunk, nccl-tests size) pairs, as `oxccl perf` walks them."""
    per_rank = n if coll != "all_reduce" else 1
    b = max(lo, esize * per_rank)
    while b <= hi:
        count = b // esize // per_rank
        yield count, count * esize * per_rank
        b *= max(step, 2)


def timed(fn, iters, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        dist.barrier()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(iters):
            fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / iters)
    return sorted(times)[len(times) // 2]


def worker(rank, args, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **NO_MULTICAST)
    gpu = rank % args.gpus
    torch.cuda.set_device(gpu)
    dev = torch.device(f"cuda:{gpu}")
    dist.init_process_group("nccl", rank=rank, world_size=args.ranks, device_id=dev)
    n = args.ranks
    csv = open(args.csv, "w") if (args.csv and rank == 0) else None
    if csv:
        csv.write("coll,dtype,ranks,bytes,time_us\n")
    if rank == 0:
        where = f"{n} ranks on GPUs 0..{min(n, args.gpus) - 1}" if args.gpus > 1 else f"{n} ranks on GPU 0"
        v = torch.cuda.nccl.version()
        v = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        large = f", from {human(args.large_from)}: {args.large_reps} x {args.large_iters}" if args.large_from else ""
        print(f"nccl {v} (torch {torch.__version__}), {where}, one process per rank; "
              f"median of {args.reps} x {args.iters} operations{large}, the slowest rank's")
    for coll in args.colls:
        for name in args.dtypes:
            dt = DTYPES[name]
            esize = torch.tensor([], dtype=dt).element_size()
            if rank == 0:
                print(f"{coll} {name} (sum)")
                print(f"{'bytes':>8} {'count':>11} {'time(us)':>10} {'algbw':>8} {'busbw':>8}")
            for count, b in sizes(coll, n, esize, args.min, args.max, args.step):
                chunk = torch.randn(count, device=dev, dtype=torch.float32).to(dt)
                if coll == "all_reduce":
                    fn = lambda: dist.all_reduce(chunk)
                elif coll == "all_gather":
                    out = torch.empty(count * n, device=dev, dtype=dt)
                    fn = lambda: dist.all_gather_into_tensor(out, chunk)
                else:
                    inp = torch.randn(count * n, device=dev, dtype=torch.float32).to(dt)
                    fn = lambda: dist.reduce_scatter_tensor(chunk, inp)
                large = args.large_from is not None and b >= args.large_from
                iters, reps = (args.large_iters, args.large_reps) if large else (args.iters, args.reps)
                t = torch.tensor([timed(fn, iters, reps)], device=dev)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                if rank == 0:
                    us = t.item()
                    algbw = b / us / 1e3
                    busbw = algbw * bus_factor(coll, n)
                    print(f"{human(b):>8} {count:>11} {us:10.2f} {algbw:8.2f} {busbw:8.2f}", flush=True)
                    if csv:
                        csv.write(f"{coll},{name},{n},{b},{us:.3f}\n")
                        csv.flush()
                del chunk, fn
                if coll == "all_gather":
                    del out
                elif coll == "reduce_scatter":
                    del inp
    if csv:
        csv.close()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--gpus", type=int, default=1, help="rank r on GPU r %% gpus")
    p.add_argument("--colls", default="all_reduce")
    p.add_argument("--dtypes", "--dtype", default="f32")
    p.add_argument("--min", type=size, default=size("1M"))
    p.add_argument("--max", type=size, default=size("128M"))
    p.add_argument("--step", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--large-from", type=size, default=None, help="from this size on, --large-iters and --large-reps")
    p.add_argument("--large-iters", type=int, default=5)
    p.add_argument("--large-reps", type=int, default=3)
    p.add_argument("--csv", default=None)
    args = p.parse_args()
    args.colls = args.colls.split(",")
    args.dtypes = args.dtypes.split(",")
    for c in args.colls:
        if c not in COLLS:
            p.error(f"unknown collective {c} (one of {', '.join(COLLS)})")
    for d in args.dtypes:
        if d not in DTYPES:
            p.error(f"unknown dtype {d} (one of {', '.join(DTYPES)})")
    os.environ.update(NO_MULTICAST)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.start_processes(worker, args=(args, port), nprocs=args.ranks, start_method="spawn")


if __name__ == "__main__":
    sys.exit(main())
