#!/usr/bin/env bash
# GPU check for oxccl, in two halves:
#
#   scripts/gpu-check.sh bundle   (on a build machine, no GPU needed)
#       builds release binaries (the PTX from ptx/ is embedded) into bundle/
#   scripts/gpu-check.sh run      (on the GPU machine, from the repository root)
#       runs every GPU test from bundle/ and prints a table; logs go to $OUT (or ./gpu-check-out)
#
# The device tool's usage (see benches/results/*.md for recorded runs):
#   scripts/gpu-check.sh bundle && device run --carry bundle -- scripts/gpu-check.sh run
#
# Environment for `run`: QUICK=1 runs a reduced matrix; PROCS_LARGE sets the large size of the
# process run (default 64M bytes per rank); STEPS picks step groups (default
# "matrix ll procs table"): matrix = every collective in one process (ranks 1..8 on the GPU);
# ll = the LL all-reduce against Simple (correctness to and past the LL capacity, then LL vs
# Simple timing from 1 KiB to 64 KiB on 2 and 8 ranks);
# procs = one process per rank under MPS (2, 4, 8 processes), then 2 without MPS;
# table = bandwidth tables of 8 ranks next to a D2D copy and ATen's torch.sum.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-}
case "$mode" in
bundle)
    # The cubin is not committed: assemble it from the committed PTX (ptxas from the pinned
    # wheel), so the binary embeds it and the driver need not JIT-compile 10 MB of PTX.
    scripts/setup-ptxas.sh
    cargo run -q -p oxccl-builder -- --require-ptxas
    git diff --quiet -- ptx/ || echo "warning: ptx/ differs from the committed one (device/ changed since)"
    cargo build --release -p oxccl
    rm -rf bundle && mkdir -p bundle
    cp target/release/oxccl bundle/
    # (no PTX copy: the binary embeds the PTX and the cubin)
    git rev-parse HEAD > bundle/COMMIT 2>/dev/null || echo unknown > bundle/COMMIT
    git diff --quiet 2>/dev/null || echo "(+ uncommitted changes)" >> bundle/COMMIT
    echo "bundle/ ready: $(du -sh bundle | cut -f1) ($(cat bundle/COMMIT | tr '\n' ' '))"
    ;;
run)
    out=${OUT:-gpu-check-out}
    mkdir -p "$out"
    export NCCL_NVLS_ENABLE=0
    bin=bundle/oxccl
    [ -x "$bin" ] || { echo "bundle/oxccl missing: run 'scripts/gpu-check.sh bundle' first and carry bundle/"; exit 2; }
    status=0
    log="$out/gpu-check.log"
    : > "$log"
    step() {
        local name=$1; shift
        echo "=== $name: $*" | tee -a "$log"
        local t0=$(date +%s.%N)
        if "$@" 2>&1 | tee -a "$log"; then r=ok; else r=FAIL; status=1; fi
        local t1=$(date +%s.%N)
        printf "%-12s %-5s %6.1fs\n" "$name" "$r" "$(awk "BEGIN{print $t1 - $t0}")" >> "$out/summary.txt"
    }
    : > "$out/summary.txt"
    echo "commit: $(cat bundle/COMMIT | tr '\n' ' ')" | tee -a "$log"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee -a "$log"
    step info "$bin" info
    step demo "$bin" demo --backend gpu
    steps=" ${STEPS:-matrix ll procs table} "
    if [[ $steps == *" matrix "* ]]; then
        if [ "${QUICK:-0}" = 1 ]; then
            step check "$bin" check --backend gpu --ranks 1,2,3,8 --counts 0,1,7,4099,65537
        else
            # every dtype x op x in/out of place, ranks 1..8, sizes 0, 1 element, odd and prime
            step check "$bin" check --backend gpu --ranks 1,2,3,4,5,6,7,8 \
                --counts 0,1,2,3,7,31,255,1000,4099,65537,1000003
            # large sizes, every element checked (bytes per rank, per dtype). A 1 GiB case on 8
            # ranks takes about 35 s (host reference), so 1 GiB is checked for the all-reduce only.
            step check-1g "$bin" check --backend gpu --bytes --colls all_reduce --ranks 8 --dtypes f32,bf16 \
                --ops sum --counts 1G
            step check-large "$bin" check --backend gpu --bytes --ranks 8,3 --dtypes bf16,f8e4m3,i32 \
                --ops sum,max --counts 64M
            step check-odd "$bin" check --backend gpu --colls all_reduce,broadcast,reduce --ranks 8,5 --dtypes bf16,f16,f64,u8 --ops sum,avg,premulsum \
                --counts 16777259
        fi
    fi
    if [[ $steps == *" ll "* ]]; then
        step ll-check "$bin" check --backend gpu --colls all_reduce --proto ll,simple --ranks 1,2,3,8 \
            --counts 1,7,31,1000,4099,16384,16385,65537 --dtypes f32,bf16,f16,i8,f64,f8e4m3 --repeat 3
        for n in 2 8; do
            step "ll-perf-$n" "$bin" perf --backend gpu --ranks $n --dtype f32 --op sum --min 1K --max 64K --step 2 \
                --proto ll,simple --iters 200 --reps 7
        done
    fi
    if [[ $steps == *" procs "* ]]; then
        # One process per rank, all on this GPU, under MPS (its daemon started here as root).
        export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
        mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
        nvidia-cuda-mps-control -d && echo "mps daemon started" | tee -a "$log"
        step procs-check "$bin" check --backend gpu --procs --ranks 2,4,8 \
            --counts 0,1,7,4099,65537,1000003 --dtypes f32,bf16,i8,f64 --ops sum,max,premulsum
        step procs-large "$bin" check --backend gpu --procs --bytes --ranks 2,8 --dtypes bf16 --ops sum --counts ${PROCS_LARGE:-64M}
        step procs-perf-f32 "$bin" perf --backend gpu --procs --ranks 2 --dtype f32 --op sum --min 16M --max 128M --step 8
        step procs-perf-8 "$bin" perf --backend gpu --procs --ranks 8 --dtype bf16 --op sum --min 1K --max 256M --step 16
        # (NCCL 2.28.9, torch's, refuses ranks sharing a GPU: "Duplicate GPU detected";
        # scripts/nccl-ref.py shows it. Its figures come from the issue: NCCL 2.32.3.)
        step procs-perf-p2p "$bin" perf --backend gpu --procs --coll send_recv --ranks 2 --dtype bf16 --min 1K --max 256M --step 16
        step procs-ll-check "$bin" check --backend gpu --procs --colls all_reduce --proto ll --ranks 2,8 \
            --counts 1,7,4099,16384,65537 --dtypes f32,bf16 --ops sum,max
        step procs-ll-perf "$bin" perf --backend gpu --procs --ranks 8 --dtype f32 --op sum --min 1K --max 64K --step 2 \
            --proto ll,simple --iters 200 --reps 7
        echo quit | nvidia-cuda-mps-control && echo "mps daemon stopped" | tee -a "$log"
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
        # Without MPS the processes' kernels are time-sliced: correct, but each wait spans
        # a time slice.
        step procs-nomps "$bin" check --backend gpu --procs --ranks 2 --colls all_reduce,all_gather \
            --counts 7,65537 --dtypes f32 --ops sum
        step procs-nomps-perf "$bin" perf --backend gpu --procs --ranks 2 --dtype f32 --op sum --min 16M --max 16M --iters 5 --reps 3
    fi
    if [[ $steps == *" table "* ]]; then
        for dt in bf16 f32; do
            for coll in all_reduce all_gather reduce_scatter; do
                step "table-$coll-$dt" "$bin" perf --backend gpu --coll $coll --ranks 8 --dtype $dt --op sum --min 1K --max 1G --step 4
            done
        done
        step table-send_recv-bf16 "$bin" perf --backend gpu --coll send_recv --ranks 8 --dtype bf16 --min 1K --max 1G --step 4
        step torch-ref python3 scripts/torch-ref.py --ranks 8 --min 1K --max 1G
    fi
    echo "=== summary"
    cat "$out/summary.txt"
    exit $status
    ;;
*)
    echo "usage: $0 bundle|run" >&2
    exit 2
    ;;
esac
