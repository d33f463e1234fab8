#!/usr/bin/env bash
# PyTorch (torch.distributed, backend "nccl") over oxccl's drop-in libnccl.so.2, on one H200, in one
# device call. All ranks are processes on cuda:0 (under MPS); every address is loopback.
#
#   build here:  scripts/torch-check.sh bundle
#       assembles the cubin as gpu-check.sh does (unless NO_CUBIN=1), then runs scripts/capi-lib.sh
#       (cargo build --release -p oxccl-capi, the libnccl.so.2 link); gzips target/release/libnccl.so into
#       bundle/libnccl.so.2.gz (it embeds ~40 MB of PTX) and writes bundle/LIBNCCL_COMMIT
#   run there:   scripts/torch-check.sh run          (device call: carry ["bundle"])
#       logs into $OUT: torch-summary.log (everything that matters, one file), torch-syms.log,
#       torch-2.log, torch-4.log, torch-ref1.log
#
# Steps of `run` (STEPS, default "syms 2 4 ref1"):
#   syms  nm -D --undefined-only <torch>/lib/libtorch_cuda.so | grep -i nccl, and each of those nccl*
#         symbols checked against nm -D --defined-only of our library (missing ones listed; a missing one
#         makes `import torch` fail under LD_PRELOAD, so this step runs without it)
#   N     (a number) scripts/torch_check.py with N processes: python3 -m torch.distributed.run
#         --nproc_per_node N --master_addr 127.0.0.1 --master_port <free> --local-addr 127.0.0.1, with
#         LD_PRELOAD=/tmp/oxccl-lib/libnccl.so.2; if torchrun dies before the test starts, the same
#         again through torch.multiprocessing spawn (torch_check.py --spawn N)
#   ref1  the same test, 1 process, the wheel's own NCCL 2.28 (no LD_PRELOAD; real NCCL refuses two ranks
#         on one GPU): shows which failures are the harness's or torch's rather than our library's
#         (information only: its failures do not fail the check)
# Per-run limits (seconds): T_2 (default 110), T_4 (140), T_ref1 (60), T_<N> for other N (140); with the
# rest, at most about 6 minutes even when every run hangs (a healthy run takes well under a minute,
# provided the library embeds the cubin: without it every process JIT-compiles ~40 MB of PTX first). Other knobs pass through to torch_check.py (SIZES, DTYPES,
# GRAPH_REPLAYS, OXCCL_PG_TIMEOUT) and to the library (NCCL_DEBUG, OXCCL_*).
# Smoke test of the checking logic without a GPU (any machine with torch):
#   OXCCL_TORCH_BACKEND=gloo python3 -m torch.distributed.run --nproc_per_node 4 --master_addr 127.0.0.1 \
#       --master_port 29511 scripts/torch_check.py
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
bundle)
    if [ "${NO_CUBIN:-0}" != 1 ]; then
        scripts/setup-ptxas.sh
        cargo run -q -p oxccl-builder -- --require-ptxas
        git diff --quiet -- ptx/ || echo "warning: ptx/ differs from the committed one (device/ changed since)"
    fi
    scripts/capi-lib.sh
    mkdir -p bundle
    lib=${CARGO_TARGET_DIR:-target}/release/libnccl.so
    [ -f "$lib" ] || { echo "error: $lib was not built"; exit 1; }
    if command -v readelf >/dev/null; then readelf -d "$lib" | grep -i soname || true; fi
    gzip -1 -c "$lib" > bundle/libnccl.so.2.gz
    { git rev-parse HEAD; git diff --quiet || echo "(+ uncommitted changes)"; sha256sum "$lib" | cut -d' ' -f1; } \
        > bundle/LIBNCCL_COMMIT
    echo "bundle/libnccl.so.2.gz: $(du -h bundle/libnccl.so.2.gz | cut -f1) ($(tr '\n' ' ' < bundle/LIBNCCL_COMMIT))"
    du -sh bundle
    ;;
run)
    out=${OUT:-torch-check-out}; mkdir -p "$out"
    sum=$out/torch-summary.log
    : > "$sum"
    say() { echo "$*" | tee -a "$sum"; }
    # Multicast stays off on these machines (KINDS.md); bootstrap on loopback only.
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-lo} GLOO_SOCKET_IFNAME=${GLOO_SOCKET_IFNAME:-lo}
    export OXCCL_BOOTSTRAP_TIMEOUT_MS=${OXCCL_BOOTSTRAP_TIMEOUT_MS:-60000} OXCCL_TIMEOUT_MS=${OXCCL_TIMEOUT_MS:-60000}
    export PYTHONUNBUFFERED=1 TORCH_NCCL_DUMP_ON_TIMEOUT=0 OMP_NUM_THREADS=1
    # should the library's PTX be JIT-compiled (no cubin embedded), keep the result for the later processes
    export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
    py=${PYTHON:-python3}
    libdir=/tmp/oxccl-lib
    mkdir -p $libdir
    # bundle/libnccl.so.2 as it is (unpacked by scripts/device-run.sh), else the .gz
    if [ -f bundle/libnccl.so.2 ]; then cp bundle/libnccl.so.2 $libdir/libnccl.so.2
    elif [ -f bundle/libnccl.so.2.gz ]; then gunzip -c bundle/libnccl.so.2.gz > $libdir/libnccl.so.2
    else say "bundle/libnccl.so.2(.gz) missing: run 'scripts/torch-check.sh bundle' and carry bundle/"; exit 2; fi
    ln -sf libnccl.so.2 $libdir/libnccl.so
    export OXCCL_LIB=$libdir/libnccl.so.2
    say "=== torch-check $(date -u +%FT%TZ); bundle: $(tr '\n' ' ' < bundle/LIBNCCL_COMMIT 2>/dev/null || echo '?')"
    say "library: $OXCCL_LIB $(stat -c %s $OXCCL_LIB) bytes, sha256 $(sha256sum $OXCCL_LIB | cut -d' ' -f1)"
    if command -v readelf >/dev/null; then say "$(readelf -d $OXCCL_LIB | grep -i soname || echo 'no SONAME')"; fi
    say "$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2)"
    tinfo=$($py -c 'import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__, "cuda", torch.version.cuda, "wheel nccl", torch.cuda.nccl.version())' 2>&1) || true
    tdir=$(echo "$tinfo" | head -1); [ -d "$tdir" ] || tdir=
    say "python: $($py --version 2>&1); torch: ${tdir:-NOT FOUND} $(echo "$tinfo" | tail -1)"
    steps=" ${STEPS:-syms 2 4 ref1} "
    st=0

    if [[ $steps == *" syms "* ]]; then
        slog=$out/torch-syms.log
        tc=$tdir/lib/libtorch_cuda.so
        if [ -z "$tdir" ] || [ ! -f "$tc" ]; then
            say "syms FAIL: no libtorch_cuda.so (torch dir '${tdir}')"; st=1
        elif command -v nm >/dev/null; then
            { echo "\$ nm -D --undefined-only $tc | grep -i nccl"; nm -D --undefined-only "$tc" | grep -i nccl; } > "$slog" || true
            need=$(nm -D --undefined-only "$tc" | awk '{print $NF}' | grep -E '^p?nccl' | sort -u || true)
            have=$(nm -D --defined-only "$OXCCL_LIB" | awk '{print $NF}' | sort -u || true)
            missing=$(comm -23 <(echo "$need") <(echo "$have") | grep . || true)
            nneed=$(echo "$need" | grep -c . || true)
            { echo "\$ nm -D --defined-only $OXCCL_LIB | grep -E ' p?nccl'"; nm -D --defined-only "$OXCCL_LIB" | grep -E ' p?nccl' || true; } >> "$slog"
            if [ -n "$missing" ]; then
                say "syms FAIL: $(echo "$missing" | grep -c .) of the $nneed nccl symbols libtorch_cuda.so imports are not defined in $OXCCL_LIB:"
                say "$(echo "$missing" | awk '{print "  missing " $0}')"
                st=1
            else
                say "syms ok: all $nneed nccl symbols libtorch_cuda.so imports are defined in our library"
            fi
        else
            say "(no nm here: reading the ELF dynamic symbol tables in python)"
            if $py scripts/torch_check.py --syms "$tc" "$OXCCL_LIB" > "$slog" 2>&1; then
                say "syms ok: $(head -1 "$slog")"
            else
                say "syms FAIL: $(head -1 "$slog")"; say "$(grep MISSING "$slog" || true)"; st=1
            fi
        fi
    fi

    # MPS: several processes share the one GPU concurrently (as scripts/sym-gpu.sh does)
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    if nvidia-cuda-mps-control -d; then say "MPS daemon started"; else say "MPS daemon did not start (running without)"; fi
    trap 'echo quit | nvidia-cuda-mps-control >/dev/null 2>&1 || true' EXIT

    free_port() { $py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
    # one test run: name, limit, preload (1/0), N
    trun() {
        local name=$1 lim=$2 pre=$3 n=$4 log=$out/torch-$1.log t0=$SECONDS rc=0 port
        port=$(free_port)
        # ours logs its communicator inits and splits (NCCL_DEBUG=INFO, subsystem CAPI), which shows that
        # torch's new_group / split_group reach ncclCommSplit
        local envs=(); if [ "$pre" = 1 ]; then envs=("LD_PRELOAD=$OXCCL_LIB" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=CAPI); else envs=(OXCCL_ALLOW_ANY_NCCL=1); fi
        say "=== $name: $n process(es), port $port, ${envs[*]}, limit ${lim}s"
        { echo "\$ ${envs[*]} $py -m torch.distributed.run --nproc_per_node $n --master_addr 127.0.0.1 --master_port $port --local-addr 127.0.0.1 scripts/torch_check.py"; } > "$log"
        env "${envs[@]}" timeout -k 10 "$lim" "$py" -m torch.distributed.run --nproc_per_node "$n" \
            --master_addr 127.0.0.1 --master_port "$port" --local-addr 127.0.0.1 scripts/torch_check.py >> "$log" 2>&1 || rc=$?
        if [ $rc -ne 0 ] && ! grep -q "oxccl-torch-check start\|mapped libnccl\|ImportError\|undefined symbol" "$log" && [ $((SECONDS - t0)) -lt $((lim / 2)) ]; then
            say "$name: torchrun exited $rc before any rank started; again through torch.multiprocessing spawn"
            tail -5 "$log" | sed 's/^/  | /' | tee -a "$sum"
            echo "=== spawn fallback" >> "$log"
            rc=0
            env "${envs[@]}" timeout -k 10 "$lim" "$py" scripts/torch_check.py --spawn "$n" >> "$log" 2>&1 || rc=$?
        fi
        [ $rc -eq 124 ] && say "$name: TIMED OUT after ${lim}s"
        # the lines that matter, into the summary: binding proof and versions (rank 0; any rank's FAIL maps),
        # merged verdicts, timing and totals, then the first raw error lines of a failed run
        {
            grep -E "^\[r0\] (PASS maps|binding:|note: also mapped|torch.cuda.nccl)|FAIL (maps|import)" "$log" | head -20
            grep -E "^SUMMARY (FAIL|SKIP)" "$log" | head -80
            grep -E "TIMING|^SUMMARY world|rank summary|tests done|^spawn:" "$log"
            if [ "$pre" = 1 ]; then
                echo "library log: $(grep -c 'ncclCommInitRank' "$log" || true) ncclCommInitRank* calls, $(grep -c 'ncclCommSplit:' "$log" || true) ncclCommSplit calls; the first splits:"
                grep 'ncclCommSplit:' "$log" | head -4 | sed 's/^/  | /'
            fi
            if [ $rc -ne 0 ]; then
                echo "-- first error lines of $log:"
                grep -E "Traceback|Error|error:|^\[r[0-9]+\] FAIL" "$log" | head -30
            fi
        } >> "$sum" || true
        if [ $rc -eq 0 ]; then r=ok; elif [ "$pre" = 1 ]; then r="FAIL (exit $rc)"; st=1; else r="not clean (exit $rc): information only, the wheel's NCCL"; fi
        say "$name: $r, $((SECONDS - t0))s"
    }
    for s in $steps; do
        case "$s" in
        syms) ;;
        ref1) trun ref1 "${T_ref1:-60}" 0 1 ;;
        *[!0-9]*) say "unknown step '$s'"; st=1 ;;
        *) v=T_$s; trun "$s" "${!v:-$([ "$s" = 2 ] && echo 110 || echo 140)}" 1 "$s" ;;
        esac
    done
    say "=== torch-check: $([ $st -eq 0 ] && echo 'all ok' || echo 'FAILURES (see above)')"
    exit $st
    ;;
*) echo "usage: $0 bundle|run   (see the notes at the top of $0)"; exit 2 ;;
esac
