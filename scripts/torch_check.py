"""torch.distributed over a drop-in libnccl.so.2 (oxccl's, target/release/libnccl.so), every rank on cuda:0.

Run by scripts/torch-check.sh (bundle here, run on the GPU machine); by hand, one process per rank:

    LD_PRELOAD=/tmp/oxccl-lib/libnccl.so.2 OXCCL_LIB=/tmp/oxccl-lib/libnccl.so.2 NCCL_NVLS_ENABLE=0 \\
        python3 -m torch.distributed.run --nproc_per_node 4 --master_addr 127.0.0.1 --master_port 29511 \\
        scripts/torch_check.py
    # or, without torchrun (torch.multiprocessing spawn, loopback env:// on a free port):
    LD_PRELOAD=... OXCCL_LIB=... python3 scripts/torch_check.py --spawn 4

What it does, in order (every rank runs the same sequence of collectives, so a failed check never
desynchronises the ranks):
  * reads /proc/self/maps and prints every libnccl*.so* mapped; FAILS (exit 3) unless the file named by
    $OXCCL_LIB is mapped and every nccl symbol libtorch_cuda.so imports resolves into it (dlsym through the
    global scope and through libtorch_cuda.so's own dependencies, dladdr for the file). The maps alone are
    no proof: torch/__init__.py also maps the wheel's nvidia/nccl/lib/libnccl.so.2 (by path, RTLD_LOCAL)
    under LD_PRELOAD; that copy binds nothing, and the check shows it. Prints torch.cuda.nccl.version();
  * for bf16, f16, f32, i64 and sizes 1, 7, 1000, 65537, 1<<20+3 (SIZES=... overrides): all_reduce SUM,
    AVG, MAX, MIN, PREMUL_SUM (python-float factor and 0-dim cuda tensor factor; for bf16 torch passes a
    float32 scalar that NCCL reads as bf16, see premul_seen), broadcast, reduce,
    all_gather (list), all_gather_into_tensor, reduce_scatter_tensor, reduce_scatter (list),
    all_to_all_single (equal and unequal splits), send/recv ring, batch_isend_irecv; then barrier,
    new_group(even ranks) and dist.split_group (if this torch has it) each with collectives;
  * inputs: integer-valued random tensors, seeded per (test, rank), small enough that every sum (and
    PREMUL_SUM's factor times a sum) is exact in the dtype; each rank regenerates every other rank's
    input and computes the reference on the CPU in float64 / int64; checks are exact element-wise,
    AVG within a few ULP of the dtype; outputs are poisoned (NaN / sentinel) before each call;
  * a CUDA graph holding one all_reduce (warmed up outside capture) replayed 100 times, fresh input
    copied in before each replay, checked after each;
  * timing (information only): one 16 MiB f32 all_reduce, median of 20, CUDA events.
Prints "PASS name" / "FAIL name: detail" / "SKIP name: reason" (rank 0 prints its PASS lines, every rank
its FAIL lines), then a summary merged over all ranks through the process group's store, and
"N passed, M failed, K skipped". Exit status nonzero on any failure.

Environment: OXCCL_LIB (path of the libnccl.so.2 that must be mapped and bound); OXCCL_ALLOW_ANY_NCCL=1
(only print the mapped libraries, e.g. a reference run with the wheel's NCCL); OXCCL_TORCH_BACKEND=gloo (a
CPU smoke test of the reference/checking logic: no CUDA graph, no timing, ops gloo lacks are skipped, the
maps/binding check only when OXCCL_LIB is set); OXCCL_GLOO_ALL_OPS=1 (with gloo, run AVG/PREMUL_SUM too:
only for a harness that emulates them); OXCCL_PG_TIMEOUT (seconds, default 90); SIZES (comma list); DTYPES (comma list of
bf16,f16,f32,i64); GRAPH_REPLAYS (default 100).
"""
import datetime
import json
import os
import socket
import statistics
import struct
import sys
import traceback
import zlib


def mapped_nccl_libs():
    libs = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6:
                path = parts[5].strip()
                if os.path.basename(path).startswith("libnccl") and ".so" in path and path not in libs:
                    libs.append(path)
    return libs


# ---------------------------------------------------------------------------------------------- ELF
def elf_dynsyms(path):
    """(defined, undefined) names from an ELF64 little-endian .dynsym (fallback when nm is missing)."""
    import struct

    import mmap

    with open(path, "rb") as f:
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError(f"{path}: not ELF64 little-endian")
    e_shoff, = struct.unpack_from("<Q", data, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", data, 0x3A)
    secs = []
    for i in range(e_shnum):
        off = e_shoff + i * e_shentsize
        name, typ, flags, addr, offset, size, link, info, align, entsize = struct.unpack_from("<IIQQQQIIQQ", data, off)
        secs.append((typ, offset, size, link, entsize))
    defined, undefined = set(), set()
    for typ, offset, size, link, entsize in secs:
        if typ != 11:  # SHT_DYNSYM
            continue
        stroff = secs[link][1]
        for j in range(size // entsize):
            st_name, st_info, st_other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", data, offset + j * entsize)
            end = data.find(b"\0", stroff + st_name)
            name = data[stroff + st_name:end].decode()
            if not name:
                continue
            (undefined if st_shndx == 0 else defined).add(name)
    return defined, undefined


def bound_provider(handle, sym):
    """file that provides `sym` as dlsym(handle) sees it, or None when it does not resolve."""
    import ctypes

    class DlInfo(ctypes.Structure):
        _fields_ = [("fname", ctypes.c_char_p), ("fbase", ctypes.c_void_p), ("sname", ctypes.c_char_p),
                    ("saddr", ctypes.c_void_p)]

    try:
        fn = getattr(handle, sym)
    except AttributeError:
        return None
    for lib in (None, "libdl.so.2"):
        try:
            dladdr = ctypes.CDLL(lib).dladdr
            break
        except (OSError, AttributeError):
            continue
    dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    info = DlInfo()
    if not dladdr(ctypes.cast(fn, ctypes.c_void_p), ctypes.byref(info)) or not info.fname:
        return "?"
    return info.fname.decode()


def nccl_binding_check(tag, want):
    """True when OXCCL_LIB is the libnccl that libtorch_cuda.so's nccl symbols bind to.

    /proc/self/maps alone is not proof: torch/__init__.py preloads the wheel's nvidia/nccl/lib/libnccl.so.2
    by path (ctypes.CDLL, RTLD_LOCAL) even under LD_PRELOAD, so that file is mapped too. What counts is
    where the symbols resolve: libtorch_cuda.so's DT_NEEDED libnccl.so.2 is matched by SONAME to the
    preloaded library, and the global scope (LD_PRELOAD first) binds its references; an RTLD_LOCAL copy is
    never searched. So: every nccl symbol libtorch_cuda.so imports must resolve, both through the global
    scope (dlsym(RTLD_DEFAULT)) and through libtorch_cuda.so's own dependency tree, into OXCCL_LIB.
    """
    import ctypes

    libs = mapped_nccl_libs()
    real = os.path.realpath(want)
    mapped_real = {os.path.realpath(p) for p in libs}
    ok = True
    if real not in mapped_real:
        print(f"{tag} FAIL maps: {want} (= {real}) is not mapped; mapped: {libs}", flush=True)
        ok = False
    others = sorted(p for p in libs if os.path.realpath(p) != real)
    if others:
        print(f"{tag} note: also mapped (torch/__init__.py preloads it RTLD_LOCAL; it must bind nothing): {others}",
              flush=True)
    tc = None
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith("/libtorch_cuda.so"):
                tc = line.split(None, 5)[5].strip()
                break
    if tc is None:
        print(f"{tag} FAIL maps: libtorch_cuda.so is not mapped", flush=True)
        return False
    try:
        _, need = elf_dynsyms(tc)
        need = sorted(x for x in need if x.startswith(("nccl", "pnccl")))
    except Exception as e:  # noqa: BLE001
        print(f"{tag} FAIL maps: reading {tc}: {e}", flush=True)
        return False
    handles = {"global": ctypes.CDLL(None), "libtorch_cuda": ctypes.CDLL(tc, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)}
    bad = []
    for sym in need:
        for hname, h in handles.items():
            where = bound_provider(h, sym)
            if where is None or os.path.realpath(where) != real:
                bad.append(f"{sym} ({hname}: {where or 'unresolved'})")
    if bad:
        more = f" ... and {len(bad) - 8} more" if len(bad) > 8 else ""
        print(f"{tag} FAIL maps: {len(bad)} bindings not into {real}: {', '.join(bad[:8])}{more}", flush=True)
        ok = False
    else:
        print(f"{tag} binding: all {len(need)} nccl symbols of {tc} resolve into {real}", flush=True)
    return ok


def syms_main(argv):
    """--syms TORCH_LIB OUR_LIB: nccl symbols TORCH_LIB needs that OUR_LIB lacks (exit 1 if any)."""
    _, need = elf_dynsyms(argv[0])
    have, _ = elf_dynsyms(argv[1])
    need = sorted(s for s in need if s.startswith(("nccl", "pnccl")))
    missing = [s for s in need if s not in have]
    print(f"{argv[0]}: {len(need)} nccl symbols undefined; {argv[1]}: {len(missing)} of them missing")
    for s in need:
        print(("  MISSING " if s in missing else "  ok      ") + s)
    return 1 if missing else 0


# ---------------------------------------------------------------------------------------------- checks
class Checker:
    def __init__(self, rank, world, verbose_pass):
        self.rank, self.world = rank, world
        self.verbose_pass = verbose_pass
        self.results = {}  # name -> (status, detail)
        self.order = []

    def record(self, name, status, detail=""):
        if name not in self.results:
            self.order.append(name)
        # a FAIL is never overwritten by a later PASS of the same name
        if self.results.get(name, ("PASS",))[0] != "FAIL":
            self.results[name] = (status, detail)
        if status == "FAIL":
            print(f"[r{self.rank}] FAIL {name}: {detail}", flush=True)
        elif status == "SKIP" and self.rank == 0:
            print(f"[r{self.rank}] SKIP {name}: {detail}", flush=True)
        elif status == "PASS" and self.verbose_pass:
            print(f"[r{self.rank}] PASS {name}{(' ' + detail) if detail else ''}", flush=True)


def first_line(e):
    s = str(e)
    return s.splitlines()[0] if s else ""


def main(argv):
    if argv[:1] == ["--syms"]:
        return syms_main(argv[1:])
    if argv[:1] == ["--spawn"]:
        return spawn_main(int(argv[1]), argv[2:])
    return rank_main()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _spawned(local_rank, world, port):
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world),
                      LOCAL_WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rc = rank_main()
    if rc:
        sys.exit(rc)


def spawn_main(n, _rest):
    import torch.multiprocessing as mp

    port = free_port()
    print(f"spawn: {n} processes, env:// on 127.0.0.1:{port}", flush=True)
    try:
        mp.spawn(_spawned, args=(n, port), nprocs=n, join=True)
    except Exception as e:  # ProcessExitedException / ProcessRaisedException
        print(f"spawn: a rank failed: {e}", flush=True)
        return 1
    return 0


def rank_main():
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    backend = os.environ.get("OXCCL_TORCH_BACKEND", "nccl")
    gpu = backend == "nccl"
    tag = f"[r{rank}]"

    try:
        import torch
        import torch.distributed as dist
    except Exception as e:  # noqa: BLE001 -- e.g. "undefined symbol: ncclX" when ours lacks one
        print(f"{tag} FAIL import torch: {type(e).__name__}: {e}", flush=True)
        return 4

    # ---- which libnccl is mapped (libtorch_cuda.so's DT_NEEDED libnccl.so.2 is loaded with torch)
    libs = mapped_nccl_libs()
    print(f"{tag} torch {torch.__version__}, pid {os.getpid()}, mapped libnccl: {libs or 'none'}", flush=True)
    want = os.environ.get("OXCCL_LIB")
    # (with gloo the check runs too when OXCCL_LIB is set: a smoke test of the check itself)
    if (gpu or want) and os.environ.get("OXCCL_ALLOW_ANY_NCCL") != "1":
        if not want:
            print(f"{tag} FAIL maps: OXCCL_LIB is not set (set OXCCL_ALLOW_ANY_NCCL=1 for a run with any NCCL)", flush=True)
            return 3
        if not nccl_binding_check(tag, want):
            return 3
        print(f"{tag} PASS maps: {os.path.realpath(want)} is mapped and is the libnccl.so.2 torch binds to", flush=True)
    if gpu:
        try:
            v = torch.cuda.nccl.version()
        except Exception as e:  # noqa: BLE001
            v = f"error: {e}"
        print(f"{tag} torch.cuda.nccl.version() = {v}; device {torch.cuda.get_device_name(0)}", flush=True)

    timeout = datetime.timedelta(seconds=float(os.environ.get("OXCCL_PG_TIMEOUT", "90")))
    if gpu:
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        dist.init_process_group("nccl", init_method="env://", rank=rank, world_size=world, timeout=timeout,
                                device_id=dev)
    else:
        dev = torch.device("cpu")
        dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world, timeout=timeout)
    print(f"{tag} init_process_group({backend}) done: world {world}", flush=True)
    if rank == 0:
        print(f"oxccl-torch-check start: world {world}, backend {backend}", flush=True)

    ck = Checker(rank, world, verbose_pass=(rank == 0))
    try:
        run_tests(torch, dist, ck, rank, world, dev, gpu)
    except Exception as e:  # noqa: BLE001 -- a crash midway: report it, the summary still follows
        ck.record("harness", "FAIL", f"{type(e).__name__}: {e}")
        traceback.print_exc()
    rc = summarize(dist, ck, rank, world)
    try:
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        print(f"{tag} destroy_process_group: {e}", flush=True)
    return rc


def summarize(dist, ck, rank, world):
    """Per-rank counts, then (rank 0) the verdict of every test over all ranks, through the store."""
    mine = {n: list(ck.results[n]) for n in ck.order}
    count = {k: sum(1 for s, _ in mine.values() if s == k) for k in ("PASS", "FAIL", "SKIP")}
    fails = count["FAIL"]
    print(f"[r{rank}] rank summary: {count['PASS']} passed, {fails} failed, {count['SKIP']} skipped", flush=True)
    store = None
    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception as e:  # noqa: BLE001
        print(f"[r{rank}] no default store ({e}): no merged summary", flush=True)
    if store is None:
        return 1 if fails else 0
    key = "oxccl_torch_check/result/"
    store.set(key + str(rank), json.dumps({"order": ck.order, "res": mine}))
    if rank != 0:
        return 1 if fails else 0
    merged, order = {}, []
    for r in range(world):
        try:
            d = json.loads(store.get(key + str(r)).decode())
        except Exception as e:  # noqa: BLE001
            d = {"order": [f"rank {r} report"], "res": {f"rank {r} report": ["FAIL", f"nothing read: {e}"]}}
        for n in d["order"]:
            if n not in merged:
                merged[n] = {}
                order.append(n)
            merged[n][r] = d["res"][n]
    npass = nfail = nskip = 0
    skips = {}  # reason -> test names
    for n in order:
        st = merged[n]
        bad = sorted(r for r, (s, _) in st.items() if s == "FAIL")
        if bad:
            nfail += 1
            print(f"SUMMARY FAIL {n} (ranks {bad}): {st[bad[0]][1]}", flush=True)
        elif all(s == "SKIP" for s, _ in st.values()):
            nskip += 1
            skips.setdefault(next(iter(st.values()))[1], []).append(n)
        else:
            npass += 1
    for reason, names in skips.items():
        print(f"SUMMARY SKIP {len(names)} test(s), {reason}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}",
              flush=True)
    print(f"SUMMARY world {world}: {npass} passed, {nfail} failed, {nskip} skipped", flush=True)
    print(f"{npass} passed, {nfail} failed, {nskip} skipped", flush=True)
    return 1 if nfail or fails else 0


# ---------------------------------------------------------------------------------------------- tests
def run_tests(torch, dist, ck, rank, world, dev, gpu):
    import time

    DT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "i64": torch.int64}
    # exact integer range of each dtype's significand: |every partial sum| must stay within it
    EXACT = {"bf16": 256, "f16": 2048, "f32": 1 << 24, "i64": 1 << 62}
    EPS = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 2.0 ** -24, "i64": 0.0}  # unit roundoff
    PREMUL = 3.0  # factor for PREMUL_SUM: exact products and sums of integer values
    sizes = [int(s, 0) for s in os.environ.get("SIZES", f"1,7,1000,65537,{(1 << 20) + 3}").split(",")]
    dtypes = os.environ.get("DTYPES", "bf16,f16,f32,i64").split(",")
    W = world
    gloo_all_ops = os.environ.get("OXCCL_GLOO_ALL_OPS") == "1"  # smoke tests that emulate AVG/PREMUL_SUM
    R = dist.ReduceOp
    f64, i64 = torch.float64, torch.int64

    def bound(dn):
        # values in [-b, b]: W * PREMUL * b within the exact range, and small for readability
        return max(1, min(EXACT[dn] // (int(PREMUL) * max(W, 1) * 2), {"bf16": 16, "f16": 64, "f32": 1000}.get(dn, 10 ** 9)))

    def gen(name, r, n, dn):
        """rank r's input of test `name`: int64 values in [-b, b] (CPU), reproducible on every rank."""
        g = torch.Generator().manual_seed(zlib.crc32(f"{name}/{dn}/{n}/{r}".encode()))
        b = bound(dn)
        return torch.randint(-b, b + 1, (n,), generator=g, dtype=i64)

    def ref_dtype(dn):
        return i64 if dn == "i64" else f64

    def to_dev(x, dn):
        # always a copy (on the CPU, .to() of an int64 tensor to int64 is the tensor itself)
        return x.to(device=dev, dtype=DT[dn], copy=True)

    def poison(shape, dn):
        if dn == "i64":
            return torch.full(shape, -0x5EADBEEF, dtype=i64, device=dev)
        return torch.full(shape, float("nan"), dtype=DT[dn], device=dev)

    def compare(name, got, ref, dn, tol=None):
        """got: device tensor of dtype dn; ref: float64/int64 CPU tensor. Exact unless tol (array or None)."""
        g = got.detach().cpu()
        if g.shape != ref.shape:
            return f"shape {tuple(g.shape)} != {tuple(ref.shape)}"
        g = g.to(ref_dtype(dn))
        if tol is None:
            bad = g != ref
            if ref.dtype == f64:
                bad |= torch.isnan(g)
        else:
            bad = ~((g - ref).abs() <= tol)  # NaN compares false: counted bad
        nbad = int(bad.sum())
        if nbad == 0:
            return None
        idx = int(bad.nonzero()[0][0])
        return (f"{nbad}/{ref.numel()} elements wrong, first at {idx}: got {g[idx].item()} want {ref[idx].item()}"
                + (f" (tol {float(tol[idx] if torch.is_tensor(tol) else tol):.3g})" if tol is not None else ""))

    def check(name, got, ref, dn, tol=None):
        try:
            err = compare(name, got, ref, dn, tol)
        except Exception as e:  # noqa: BLE001
            err = f"check raised {type(e).__name__}: {e}"
        ck.record(name, "FAIL" if err else "PASS", err or "")
        return err is None

    def attempt(name, fn):
        """run fn() (the collectives of one test); an exception is that test's FAIL."""
        try:
            fn()
            return True
        except Exception as e:  # noqa: BLE001
            ck.record(name, "FAIL", f"raised {type(e).__name__}: {first_line(e)}")
            return False

    def sync():
        if gpu:
            torch.cuda.synchronize()

    # torch hands NCCL a float32 scalar for bf16 tensors (unpackPreMulSum<float, ncclBfloat16>, and a
    # factor tensor must then be float32), while NCCL reads the scalar as the reduction's dtype: the
    # first two bytes of the float. A factor whose float32 bits are 0x40404040 (3.0039...) reads as
    # bf16 0x4040 = 3.0; the reference uses the value NCCL reads, computed from the bytes.
    BF16_PREMUL = struct.unpack("<f", bytes([0x40] * 4))[0]

    def premul_factor(dn):
        return BF16_PREMUL if dn == "bf16" else PREMUL

    def premul_seen(dn):
        if dn != "bf16":
            return PREMUL
        return struct.unpack("<f", b"\x00\x00" + struct.pack("<f", BF16_PREMUL)[:2])[0]

    def premul_op(dn, tensor_factor):
        f = premul_factor(dn)
        if tensor_factor:
            fdt = torch.float32 if dn == "bf16" else DT[dn]
            return dist._make_nccl_premul_sum(torch.tensor(f, dtype=fdt, device=dev))
        return dist._make_nccl_premul_sum(f)

    def avg_tol(ref, xs, dn):
        # NCCL averages floats as a pre-multiply by 1/W then a sum in the dtype: W roundings of x_i/W and
        # W-1 of partial sums, every one of them at most sum_i |x_i| / W in magnitude; twice that bound
        return (2 * EPS[dn] * (W + 1)) * (xs.to(f64).abs().sum(0) / W)

    t0 = time.time()
    # ------------------------------------------------------------------ per dtype and size
    for dn in dtypes:
        isint = dn == "i64"
        for n in sizes:
            sfx = f"{dn} n={n}"

            # all_reduce
            ops = [("SUM", R.SUM), ("AVG", R.AVG), ("MAX", R.MAX), ("MIN", R.MIN), ("PREMUL_SUM", None),
                   ("PREMUL_SUM_TENSOR", None)]
            for opn, op in ops:
                name = f"all_reduce {opn} {sfx}"
                if not gpu and opn in ("AVG", "PREMUL_SUM", "PREMUL_SUM_TENSOR") and not gloo_all_ops:
                    ck.record(name, "SKIP", "gloo has no AVG / PREMUL_SUM")
                    continue
                if isint and opn.startswith("PREMUL"):
                    ck.record(name, "SKIP", "torch: PREMUL_SUM is for floating dtypes only")
                    continue
                xs = torch.stack([gen(name, r, n, dn) for r in range(W)])
                t = to_dev(xs[rank], dn)
                try:
                    rop = premul_op(dn, opn == "PREMUL_SUM_TENSOR") if opn.startswith("PREMUL") else op
                except Exception as e:  # noqa: BLE001
                    ck.record(name, "SKIP", f"_make_nccl_premul_sum: {type(e).__name__}: {e}")
                    continue
                try:
                    dist.all_reduce(t, op=rop)
                    sync()
                except (TypeError, ValueError, NotImplementedError) as e:
                    # torch's own refusals of an op/dtype pair (C10 TypeError/ValueError), before any
                    # NCCL call; an NCCL error is a DistBackendError (a RuntimeError): FAIL below
                    ck.record(name, "SKIP", f"torch refused: {type(e).__name__}: {first_line(e)}")
                    continue
                except Exception as e:  # noqa: BLE001
                    ck.record(name, "FAIL", f"raised {type(e).__name__}: {first_line(e)}")
                    continue
                tol = None
                if opn == "SUM":
                    ref = xs.sum(0) if isint else xs.to(f64).sum(0)
                elif opn == "MAX":
                    ref = xs.max(0).values.to(ref_dtype(dn))
                elif opn == "MIN":
                    ref = xs.min(0).values.to(ref_dtype(dn))
                elif opn == "AVG":
                    if isint:
                        ref = torch.div(xs.sum(0), W, rounding_mode="trunc")
                    else:
                        ref = xs.to(f64).sum(0) / W
                        tol = avg_tol(ref, xs, dn)
                else:
                    ref = xs.to(f64).sum(0) * premul_seen(dn)
                check(name, t, ref, dn, tol)

            # broadcast from a root that moves with the size
            root = sizes.index(n) % W
            name = f"broadcast root={root} {sfx}"
            x = gen(name, root, n, dn)
            t = to_dev(x, dn) if rank == root else poison((n,), dn)
            if attempt(name, lambda: dist.broadcast(t, src=root)):
                check(name, t, x.to(ref_dtype(dn)), dn)

            # reduce SUM to root (only the root's buffer is defined)
            root = (sizes.index(n) + 1) % W
            name = f"reduce SUM root={root} {sfx}"
            xs = torch.stack([gen(name, r, n, dn) for r in range(W)])
            t = to_dev(xs[rank], dn)
            if attempt(name, lambda: dist.reduce(t, dst=root, op=R.SUM)):
                if rank == root:
                    check(name, t, xs.to(ref_dtype(dn)).sum(0), dn)
                else:
                    # a non-root's buffer is undefined after reduce; count the test as passed here
                    ck.record(name, "PASS", "(non-root)")

            # all_gather (list)
            name = f"all_gather list {sfx}"
            xs = torch.stack([gen(name, r, n, dn) for r in range(W)])
            outs = [poison((n,), dn) for _ in range(W)]
            if attempt(name, lambda: dist.all_gather(outs, to_dev(xs[rank], dn))):
                check(name, torch.stack(outs), xs.to(ref_dtype(dn)), dn)

            # all_gather_into_tensor
            name = f"all_gather_into_tensor {sfx}"
            xs = torch.stack([gen(name, r, n, dn) for r in range(W)])
            out = poison((W * n,), dn)
            if attempt(name, lambda: dist.all_gather_into_tensor(out, to_dev(xs[rank], dn))):
                check(name, out, xs.to(ref_dtype(dn)).reshape(-1), dn)

            # reduce_scatter_tensor SUM: rank r's input is W blocks of n; out = block `rank` summed
            name = f"reduce_scatter_tensor SUM {sfx}"
            xs = torch.stack([gen(name, r, W * n, dn) for r in range(W)])
            out = poison((n,), dn)
            if attempt(name, lambda: dist.reduce_scatter_tensor(out, to_dev(xs[rank], dn), op=R.SUM)):
                check(name, out, xs.to(ref_dtype(dn)).sum(0)[rank * n:(rank + 1) * n], dn)

            # reduce_scatter (list)
            name = f"reduce_scatter list SUM {sfx}"
            if not gpu:
                ck.record(name, "SKIP", "gloo has no reduce_scatter (list)")
            else:
                xs = torch.stack([gen(name, r, W * n, dn) for r in range(W)])
                out = poison((n,), dn)
                inl = list(to_dev(xs[rank], dn).chunk(W))
                if attempt(name, lambda: dist.reduce_scatter(out, inl, op=R.SUM)):
                    check(name, out, xs.to(ref_dtype(dn)).sum(0)[rank * n:(rank + 1) * n], dn)

            # all_to_all_single, equal splits: block p of rank r's input goes to rank p, block r
            name = f"all_to_all_single equal {sfx}"
            xs = torch.stack([gen(name, r, W * n, dn) for r in range(W)])
            out = poison((W * n,), dn)
            if attempt(name, lambda: dist.all_to_all_single(out, to_dev(xs[rank], dn))):
                ref = torch.cat([xs[p][rank * n:(rank + 1) * n] for p in range(W)]).to(ref_dtype(dn))
                check(name, out, ref, dn)

            # all_to_all_single, unequal splits (zero-length ones at n=1): s(r, p) elements r -> p
            def split(r, p):
                return (n * ((r + 2 * p) % 3 + 1)) // 2

            name = f"all_to_all_single unequal {sfx}"
            ins = [gen(name, r, sum(split(r, p) for p in range(W)), dn) for r in range(W)]
            in_splits = [split(rank, p) for p in range(W)]
            out_splits = [split(p, rank) for p in range(W)]
            out = poison((sum(out_splits),), dn)
            if attempt(name, lambda: dist.all_to_all_single(out, to_dev(ins[rank], dn), out_splits, in_splits)):
                parts = []
                for p in range(W):
                    off = sum(split(p, q) for q in range(rank))
                    parts.append(ins[p][off:off + split(p, rank)])
                check(name, out, torch.cat(parts).to(ref_dtype(dn)), dn)

            if W > 1:
                # send/recv ring: even ranks send first, odd ranks receive first
                name = f"send/recv ring {sfx}"
                nxt, prv = (rank + 1) % W, (rank - 1) % W
                x = to_dev(gen(name, rank, n, dn), dn)
                out = poison((n,), dn)

                def ring():
                    if rank % 2 == 0:
                        dist.send(x, dst=nxt)
                        dist.recv(out, src=prv)
                    else:
                        dist.recv(out, src=prv)
                        dist.send(x, dst=nxt)
                    sync()

                if attempt(name, ring):
                    check(name, out, gen(name, prv, n, dn).to(ref_dtype(dn)), dn)

                # batch_isend_irecv: to and from both neighbours in one batch
                name = f"batch_isend_irecv {sfx}"
                x = to_dev(gen(name, rank, n, dn), dn)
                o_prv, o_nxt = poison((n,), dn), poison((n,), dn)

                def batch():
                    ops = [dist.P2POp(dist.isend, x, nxt), dist.P2POp(dist.irecv, o_prv, prv)]
                    if W > 2:
                        ops += [dist.P2POp(dist.isend, x, prv), dist.P2POp(dist.irecv, o_nxt, nxt)]
                    for w in dist.batch_isend_irecv(ops):
                        w.wait()
                    sync()

                if attempt(name, batch):
                    got = [o_prv] + ([o_nxt] if W > 2 else [])
                    want = [gen(name, prv, n, dn)] + ([gen(name, nxt, n, dn)] if W > 2 else [])
                    check(name, torch.stack(got), torch.stack(want).to(ref_dtype(dn)), dn)
            else:
                ck.record(f"send/recv ring {sfx}", "SKIP", "one rank")
        if rank == 0:
            print(f"[r0] dtype {dn} done ({time.time() - t0:.1f}s)", flush=True)

    # ------------------------------------------------------------------ barrier, groups
    name = "barrier"
    if attempt(name, lambda: dist.barrier()):
        ck.record(name, "PASS")

    def group_tests(label, pg, members):
        """all_reduce SUM (f32 65537, bf16 1000) and all_gather_into_tensor (i64 1000) on pg."""
        G = len(members)
        me = members.index(rank)
        for dn, n in (("f32", 65537), ("bf16", 1000)):
            name = f"{label} all_reduce SUM {dn} n={n}"
            xs = torch.stack([gen(name, r, n, dn) for r in members])
            t = to_dev(xs[me], dn)
            if attempt(name, lambda: dist.all_reduce(t, op=R.SUM, group=pg)):
                check(name, t, xs.to(f64).sum(0), dn)
        name = f"{label} all_gather_into_tensor i64 n=1000"
        xs = torch.stack([gen(name, r, 1000, "i64") for r in members])
        out = poison((G * 1000,), "i64")
        if attempt(name, lambda: dist.all_gather_into_tensor(out, to_dev(xs[me], "i64"), group=pg)):
            check(name, out, xs.reshape(-1), "i64")
        name = f"{label} broadcast f16 n=7"
        src = members[-1]
        x = gen(name, src, 7, "f16")
        t = to_dev(x, "f16") if rank == src else poison((7,), "f16")
        if attempt(name, lambda: dist.broadcast(t, src=src, group=pg)):
            check(name, t, x.to(f64), "f16")

    evens = list(range(0, W, 2))
    odds = list(range(1, W, 2))
    name = "new_group(evens)"
    try:
        pg = dist.new_group(ranks=evens, timeout=datetime.timedelta(seconds=90))
        ck.record(name, "PASS", f"ranks {evens}")
    except Exception as e:  # noqa: BLE001
        pg = None
        ck.record(name, "FAIL", f"raised {type(e).__name__}: {e}")
    if pg is not None and rank in evens:
        group_tests(f"new_group(evens={evens})", pg, evens)

    name = "split_group(evens|odds)"
    if not hasattr(dist, "split_group"):
        ck.record(name, "SKIP", "torch.distributed has no split_group")
    elif not gpu:
        ck.record(name, "SKIP", "split_group needs the NCCL backend")
    else:
        groups = [g for g in (evens, odds) if g]
        try:
            spg = dist.split_group(split_ranks=groups, timeout=datetime.timedelta(seconds=90))
            ck.record(name, "PASS", f"{groups}")
        except Exception as e:  # noqa: BLE001
            spg = None
            ck.record(name, "FAIL", f"raised {type(e).__name__}: {e}")
        if spg is not None:
            mine = evens if rank in evens else odds
            group_tests(f"split_group({'evens' if rank in evens else 'odds'}={mine})", spg, mine)

    name = "barrier after groups"
    if attempt(name, lambda: dist.barrier()):
        ck.record(name, "PASS")

    # ------------------------------------------------------------------ CUDA graph
    replays = int(os.environ.get("GRAPH_REPLAYS", "100"))
    if not gpu:
        ck.record("cuda_graph all_reduce", "SKIP", "no CUDA on gloo")
    else:
        for dn, n in (("f32", 65537), ("bf16", 1000)):
            name = f"cuda_graph all_reduce SUM {dn} n={n} x{replays}"
            buf = torch.zeros(n, dtype=DT[dn], device=dev)
            try:
                s = torch.cuda.Stream()
                s.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s):
                    for _ in range(3):  # warm-up outside capture (communicator, buffers)
                        dist.all_reduce(buf)
                torch.cuda.current_stream().wait_stream(s)
                torch.cuda.synchronize()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    dist.all_reduce(buf)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                ck.record(name, "FAIL", f"capture raised {type(e).__name__}: {first_line(e)}")
                continue
            nbad = 0
            first = None
            for i in range(replays):
                xs = torch.stack([gen(f"{name}/{i}", r, n, dn) for r in range(W)])
                buf.copy_(xs[rank].to(DT[dn]).to(dev))
                try:
                    g.replay()
                    err = compare(name, buf, xs.to(f64).sum(0), dn)
                except Exception as e:  # noqa: BLE001
                    err = f"replay raised {type(e).__name__}: {e}"
                if err:
                    nbad += 1
                    first = first or f"replay {i}: {err}"
            ck.record(name, "FAIL" if nbad else "PASS", f"{nbad}/{replays} replays wrong; {first}" if nbad else "")
            del g

    # ------------------------------------------------------------------ timing (information)
    if gpu:
        n = (16 << 20) // 4
        x = torch.ones(n, dtype=torch.float32, device=dev)
        try:
            for _ in range(5):
                dist.all_reduce(x)
            torch.cuda.synchronize()
            times = []
            for _ in range(20):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                dist.barrier()
                torch.cuda.synchronize()
                a.record()
                dist.all_reduce(x)
                b.record()
                b.synchronize()
                times.append(a.elapsed_time(b))
            med = statistics.median(times)
            busbw = 2 * (W - 1) / W * n * 4 / (med * 1e-3) / 1e9
            print(f"[r{rank}] TIMING all_reduce f32 16 MiB, {W} ranks on one GPU: median {med * 1e3:.1f} us "
                  f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}; algbw {n * 4 / (med * 1e-3) / 1e9:.1f} GB/s, "
                  f"busbw {busbw:.1f} GB/s)", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"[r{rank}] TIMING failed: {type(e).__name__}: {e}", flush=True)
    if rank == 0:
        print(f"[r0] tests done in {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
