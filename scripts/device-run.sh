#!/usr/bin/env bash
# One device call for several GPU scripts, within the device tool's limits (the working tree
# that travels, ptx/ included, stays under 64 MiB: binaries go as xz; at most 8 files come
# back from $OUT: one log per part plus the summary).
#
#   here:   scripts/device-run.sh bundle [oxccl window_gpu libnccl user_ptx]   (default: all four)
#           builds what is named (cubin assembled from ptx/ first), xz-compresses it into bundle/
#   there:  PARTS="gpucheck sym devapi tune torch stores" scripts/device-run.sh run
#           (device call with carry ["bundle"]); each part's own knobs pass through
#           (GPUCHECK_STEPS -> gpu-check.sh STEPS, SYM_STEPS -> sym-gpu.sh STEPS, TORCH_STEPS ->
#           torch-check.sh STEPS, the others as those scripts document); PART_LIMIT_<part> seconds
#           (default 300) bounds each part.
# Parts: gpucheck = scripts/gpu-check.sh run (table, procs: only that step of it); sym = scripts/sym-gpu.sh run; devapi = the LLVM IR
# user kernel linked against ptx/oxccl_device.bc run on 1, 2, 4, 8 ranks (oxccl devapi-run);
# tune = scripts/sym-tune.sh; torch = scripts/torch-check.sh run; stores = scripts/copy-stores.sh run.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
bundle)
    shift
    what=" ${*:-oxccl window_gpu libnccl user_ptx} "
    set -e
    mkdir -p bundle
    rm -f bundle/*.xz bundle/oxccl bundle/window_gpu bundle/libnccl.so.2 bundle/user.ptx
    scripts/setup-ptxas.sh >/dev/null
    cargo run -q -p oxccl-builder -- --require-ptxas >/dev/null
    git diff --quiet -- ptx/ || echo "note: ptx/ differs from the committed one (device/ changed since)"
    if [[ $what == *" oxccl "* ]]; then
        cargo build -q --release -p oxccl
        xz -T0 -6 -c target/release/oxccl > bundle/oxccl.xz
    fi
    if [[ $what == *" window_gpu "* ]]; then
        cargo test -q --release -p oxccl --test window_gpu --no-run 2>/dev/null
        wg=$(ls -t target/release/deps/window_gpu-* | grep -v '\.d$' | head -1)
        xz -T0 -6 -c "$wg" > bundle/window_gpu.xz
    fi
    if [[ $what == *" libnccl "* ]]; then
        cargo build -q --release -p oxccl-capi
        xz -T0 -6 -c target/release/libnccl.so > bundle/libnccl.so.2.xz
    fi
    if [[ $what == *" user_ptx "* ]]; then
        scripts/link-user-kernel.sh bundle/user.ptx
    fi
    { git rev-parse HEAD; git diff --quiet || echo "(+ uncommitted changes)"; } > bundle/COMMIT
    cp bundle/COMMIT bundle/LIBNCCL_COMMIT
    ls -la bundle; du -sh bundle
    echo "tree that travels: $(( ( $(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) + $(du -cb bundle | tail -1 | cut -f1) ) >> 20 )) MiB of 64"
    ;;
run)
    out=${OUT:-device-run-out}; mkdir -p "$out"
    export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
    for f in oxccl window_gpu; do [ -f bundle/$f.xz ] && xz -dc bundle/$f.xz > bundle/$f && chmod +x bundle/$f; done
    [ -f bundle/libnccl.so.2.xz ] && xz -dc bundle/libnccl.so.2.xz > bundle/libnccl.so.2
    [ -x bundle/oxccl ] && cp bundle/oxccl /tmp/oxccl
    sum=$out/summary.txt
    echo "=== device-run $(date -u +%FT%TZ); bundle $(tr '\n' ' ' < bundle/COMMIT)" | tee "$sum"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader | tee -a "$sum"
    part() { # name, then the command; its OUT is a folder whose files are concatenated into $out/<name>.log
        local name=$1; shift
        local lim_var="PART_LIMIT_$name" t0=$SECONDS rc=0 sub=/tmp/device-run/$name
        rm -rf "$sub"; mkdir -p "$sub"
        echo "=== part $name: $* (limit ${!lim_var:-300}s)" | tee -a "$sum"
        OUT=$sub timeout -k 10 "${!lim_var:-300}" "$@" > "$sub/stdout.txt" 2>&1 || rc=$?
        { for f in "$sub"/*; do echo "##### $(basename "$f")"; cat "$f"; done; } > "$out/$name.log"
        tail -25 "$sub/stdout.txt" | sed 's/^/  | /' >> "$sum"
        echo "part $name rc=$rc $((SECONDS - t0))s" | tee -a "$sum"
    }
    for p in ${PARTS:-gpucheck sym devapi}; do
        case $p in
        gpucheck) STEPS=${GPUCHECK_STEPS:-matrix ll procs table} part gpucheck scripts/gpu-check.sh run ;;
        table | procs) STEPS=$p part gpu_$p scripts/gpu-check.sh run ;;
        sym) STEPS=${SYM_STEPS:-windows check procs soak latency bw} part sym scripts/sym-gpu.sh run ;;
        devapi) part devapi bash -c 'st=0; for n in 1 2 4 8; do bundle/oxccl devapi-run --ptx bundle/user.ptx --ranks $n || st=1; done; exit $st' ;;
        tune) BIN=/tmp/oxccl part tune scripts/sym-tune.sh ;;
        torch) STEPS=${TORCH_STEPS:-syms 2 4 ref1} part torch scripts/torch-check.sh run ;;
        stores) part stores scripts/copy-stores.sh run ;;
        *) echo "unknown part $p" | tee -a "$sum" ;;
        esac
    done
    grep -E "^part " "$sum"
    ;;
*) echo "usage: $0 bundle [what...] | run" >&2; exit 2 ;;
esac
