"""oxccl next to NCCL: joins `oxccl perf` logs with `scripts/nccl-ref.py --csv` rows and
writes one markdown table per collective and data type.

Per size (nccl-tests' size: bytes per rank for all_reduce, the gathered output for
all_gather, the scattered input for reduce_scatter): each side's time, algbw = size / time
and busbw = algbw x nccl-tests' factor (all_reduce 2(n-1)/n, all_gather and reduce_scatter
(n-1)/n; 0 on one rank, as nccl-tests prints), recomputed here from the times so both sides
use the same formula, then `oxccl/nccl time` (below 1: oxccl faster) and `oxccl/nccl busbw`
(above 1: oxccl faster). Rows are joined on (collective, data type, rank count, size); a side
without a row shows `-`.

usage: python3 scripts/multigpu-compare.py --oxccl LABEL=perf.log [--oxccl LABEL2=log2]
           [--nccl nccl.csv] [--out table.md]
"""
import argparse
import csv
import re
import sys

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
HEAD = re.compile(r"^oxccl perf: (\w+) (\w+)(?: \w+)?, (\d+) ranks?\b")


def parse_size(s):
    s = s.strip()
    if s and s[-1].upper() in UNITS:
        return int(s[:-1]) * UNITS[s[-1].upper()]
    return int(s)


def human(b):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return f"{b // m}{unit}"
    return str(b)


def bus_factor(coll, n):
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n if coll == "all_reduce" else (n - 1) / n


def parse_oxccl(path):
    """{(coll, dtype, ranks, bytes): time_us} from an `oxccl perf` log (the first row of a
    size counts: with several --proto values the tuner's own choice comes first only if
    asked; graph and write-reference rows are skipped)."""
    rows, cur = {}, None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            m = HEAD.match(line)
            if m:
                cur = (m.group(1), m.group(2), int(m.group(3)))
                continue
            if cur is None or len(line) < 8 or not line[:8].strip():
                continue
            tok = line.split()
            try:
                b = parse_size(tok[0])
                nums = [float(t) for t in tok[-7:]]
            except (ValueError, IndexError):
                continue
            if len(tok) < 9:
                continue
            rows.setdefault((*cur, b), nums[0])
    return rows


def parse_nccl(path):
    rows = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            rows[(r["coll"], r["dtype"], int(r["ranks"]), int(r["bytes"]))] = float(r["time_us"])
    return rows


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def table(oxccl, nccl):
    """Markdown tables, one per (coll, dtype, ranks)."""
    keys = set()
    for rows in list(oxccl.values()) + [nccl]:
        keys.update(k[:3] for k in rows)
    out = []
    order = {"all_reduce": 0, "all_gather": 1, "reduce_scatter": 2}
    for coll, dt, n in sorted(keys, key=lambda k: (order.get(k[0], 9), k[0], k[1], k[2])):
        sizes = sorted({k[3] for rows in list(oxccl.values()) + [nccl] for k in rows if k[:3] == (coll, dt, n)})
        out.append(f"### {coll} {dt}, {n} rank{'s' if n != 1 else ''} (busbw factor {bus_factor(coll, n):.3f})\n")
        head = ["bytes"]
        for label in oxccl:
            head += [f"{label} time (us)", f"{label} algbw", f"{label} busbw"]
        head += ["nccl time (us)", "nccl algbw", "nccl busbw"]
        for label in oxccl:
            head += [f"{label}/nccl time", f"{label}/nccl busbw"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + " ---: |" * len(head))
        for b in sizes:
            t_n = nccl.get((coll, dt, n, b))
            cells = [human(b)]
            ratios = []
            for label, rows in oxccl.items():
                t = rows.get((coll, dt, n, b))
                alg = b / t / 1e3 if t else None
                cells += [fmt(t, ".2f"), fmt(alg, ".2f"), fmt(alg * bus_factor(coll, n) if alg else None, ".2f")]
                rt = t / t_n if (t and t_n) else None
                rb = (t_n / t) if (t and t_n and n > 1) else None
                ratios += [fmt(rt, ".3f"), fmt(rb, ".3f")]
            alg_n = b / t_n / 1e3 if t_n else None
            cells += [fmt(t_n, ".2f"), fmt(alg_n, ".2f"), fmt(alg_n * bus_factor(coll, n) if alg_n else None, ".2f")]
            out.append("| " + " | ".join(cells + ratios) + " |")
        out.append("")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--oxccl", action="append", default=[], help="LABEL=PATH of an oxccl perf log")
    p.add_argument("--nccl", default=None)
    p.add_argument("--out", default=None)
    a = p.parse_args()
    oxccl = {}
    for spec in a.oxccl:
        label, _, path = spec.partition("=")
        try:
            oxccl[label] = parse_oxccl(path)
        except OSError as e:
            print(f"{label}: {e}", file=sys.stderr)
            oxccl[label] = {}
    nccl = {}
    if a.nccl:
        try:
            nccl = parse_nccl(a.nccl)
        except (OSError, KeyError, ValueError) as e:
            print(f"nccl: {e}", file=sys.stderr)
    text = table(oxccl, nccl)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0 if any(oxccl.values()) or nccl else 1


if __name__ == "__main__":
    sys.exit(main())
