"""ATen references for the bandwidth tables, timed on the GPU with CUDA events.

For every size (bytes per rank, powers of 4 from --min to --max) and dtype: torch.sum over
`ranks` stacked inputs of that size (what an all-reduce's reduction must read and write),
and a device-to-device copy of the same bytes. Prints one row per size: median time, and
bytes moved (read + write) per second.

usage: python3 scripts/torch-ref.py [--ranks 8] [--min 1K] [--max 1G] [--dtypes bf16,f32]
"""
import argparse
import torch


def size(s):
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(s[:-1] if mul > 1 else s) * mul


def median_ms(fn, iters, reps=7):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / iters)
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--min", default="1K")
    p.add_argument("--max", default="1G")
    p.add_argument("--dtypes", default="bf16,f32")
    a = p.parse_args()
    dts = {"bf16": torch.bfloat16, "f32": torch.float32}
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}: torch.sum over {a.ranks} stacked inputs, and a copy of one input")
    print(f"{'dtype':>6} {'bytes':>10} {'sum(us)':>10} {'sum GB/s':>10} {'copy(us)':>10} {'copy GB/s':>10}")
    for name in a.dtypes.split(","):
        dt = dts[name]
        b = size(a.min)
        while b <= size(a.max):
            n = max(1, b // torch.tensor([], dtype=dt).element_size())
            x = torch.randn(a.ranks, n, device="cuda").to(dt)
            out = torch.empty(n, device="cuda", dtype=dt)
            iters = 20 if b >= (64 << 20) else 100
            t_sum = median_ms(lambda: torch.sum(x, dim=0, out=out), iters)
            src, dst = x[0], torch.empty_like(x[0])
            t_copy = median_ms(lambda: dst.copy_(src), iters)
            es = x.element_size()
            sum_bytes = (a.ranks + 1) * n * es
            print(f"{name:>6} {b:>10} {t_sum * 1e3:>10.2f} {sum_bytes / t_sum / 1e6:>10.1f} {t_copy * 1e3:>10.2f} {2 * n * es / t_copy / 1e6:>10.1f}")
            del x, out, dst
            b *= 4


if __name__ == "__main__":
    main()
