#!/usr/bin/env bash
# The small all-reduce's latency against what the hardware allows (issue 4), in one device call:
#  1. benches/micro/kernel_costs.cu: single operations inside graph-replayed kernels, and an
#     ideal Lamport all-reduce written directly in CUDA (serial / prefetched / hoisted input,
#     with and without the writer's fence and the block barrier) on 1, 2 and 8 ranks;
#  2. scripts/latency-probe.sh: our kernels, graph-replayed, next to the empty-kernel floor;
#  3. ncu (hardware counters, clocks left alone) on our 1-rank Lamport kernel and on the ideal
#     serial CUDA kernel: duration, instructions, stall reasons, per-instruction samples.
#
#   build here:  cargo build --release -p oxccl && gzip -1 -c target/release/oxccl > bundle/oxccl.gz
#   run there:   bash scripts/latency-floor.sh      (device call: carry ["bundle"]); logs in $OUT
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-latency-floor-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
b=bundle/oxccl
if [ ! -x "$b" ]; then
    gunzip -c bundle/oxccl.gz > /tmp/oxccl-floor && chmod +x /tmp/oxccl-floor && b=/tmp/oxccl-floor
fi
kc=/tmp/kernel_costs
{ nvcc -O2 -arch=sm_90 benches/micro/kernel_costs.cu -o "$kc" && timeout 120 "$kc"; } 2>&1 | tee "$out/kernel-costs.log"
OUT=$out SETTINGS="${SETTINGS:-lamport ll simple-oneshot}" timeout 300 bash scripts/latency-probe.sh > /dev/null 2>&1
tail -n +1 "$out/latency-probe.log" | grep -E "==|sym/|direct/|graph replay" 
if [ "${NCU:-1}" = 1 ] && command -v ncu > /dev/null; then
    m=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__cycles_active.avg,sm__warps_active.avg.per_cycle_active
    ncu_run() {
        local name=$1; shift
        echo "== ncu $name" | tee -a "$out/ncu.log"
        timeout 120 ncu --clock-control none --launch-skip 60 --launch-count 1 "$@" 2>&1 | tail -n 200 >> "$out/ncu.log"
    }
    ncu_run "ours lamport f32 1 rank 8 B (details)" -k regex:oxccl_sym_lamport_f32 \
        --section SpeedOfLight --section WarpStateStats --section LaunchStats --metrics $m \
        env OXCCL_SYM=lamport "$b" perf --backend gpu --window --ranks 1 --dtype f32 --op sum --min 8 --max 8 --graph 20
    # Per-instruction SASS (executed counts and stall samples) in full, for the executed path.
    for k in lamport ll; do
        timeout 120 ncu --clock-control none --launch-skip 60 --launch-count 1 -k regex:oxccl_sym_${k}_f32 \
            --section SourceCounters --page source --print-source sass --csv \
            env OXCCL_SYM=$k "$b" perf --backend gpu --window --ranks 1 --dtype f32 --op sum --min 4K --max 4K --graph 20 \
            > "$out/sass-$k-f32-1rank-4K.csv" 2>&1
    done
    timeout 120 ncu --clock-control none --launch-skip 60 --launch-count 1 -k regex:k_lamport \
        --section SourceCounters --page source --print-source sass --csv "$kc" > "$out/sass-ideal.csv" 2>&1
    ncu_run "ideal serial CUDA Lamport (details)" -k regex:k_lamport \
        --section SpeedOfLight --section WarpStateStats --metrics $m "$kc"
    grep -E "^== |Duration|Executed Instructions |gpu__time_duration|smsp__inst_executed.sum|Stall|Warp Cycles Per Issued" "$out/ncu.log" | head -60
fi
