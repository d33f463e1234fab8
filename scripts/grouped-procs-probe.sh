#!/usr/bin/env bash
# (Session 11: its first step ran and failed at once: --op was passed twice; fixed, not rerun.
# Its plain step ran: benches/results/2026-12-07-s11-call1-hostcost-h100.log.)
# Why the grouped kernels lose across processes (benches/results/2026-12-07-grouped-h200.md:
# +0.8-1.1 us on 8 ranks under MPS, against -0.3-0.8 in one process). Prepared in the tenth
# session and not yet run (no device machine could be started).
#   here:   build, then xz target/release/oxccl > bundle/oxccl-final.xz
#   there:  bash scripts/grouped-procs-probe.sh   (device call, carry ["bundle"]); logs in $OUT
# If it is the instruction footprint (each process fetching its own copy of the code), a
# larger kernel on the executed path should lose more across processes than in one: the Sum
# kernel against the general Lamport kernel (operator max), each in one process and across
# processes, grouped on and off, 2 and 8 ranks. Then the plain-timed 8-rank launch loop
# (call 2 there: Simple two-shot 44.8 us against the classic kernels' 36.3 at 256 KiB):
# Simple with and without PDL and on 8 CTAs, Lamport, classic, and 2 ranks for comparison.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/call-lib.sh
call_init final
export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d || true
export OXCCL_SYM=lamport
for n in 2 8; do
    for op in sum max; do
        for g in off on; do
            for where in "" --procs; do
                PERF_OP=$op OXCCL_SYM_GROUPED=$g perf_rows final "g=$g $op ${where:-inproc}" $where --window --ranks $n --min 8 --max 4K --step 8
            done
        done
    done
done
echo quit | nvidia-cuda-mps-control || true
save procs
unset OXCCL_SYM
plain() { # label, env..., perf args: the plain-timed rows into plain.log
    local l=$1; shift
    echo "== $l" >> $O/plain.log
    env "$@" > /tmp/p.out 2>&1
    grep -E "^ +[0-9]+[KM]? +[0-9]+ " /tmp/p.out >> $O/plain.log
}
B=/tmp/oxccl-final
for r in 1 2; do
    plain "simple pdl=1" OXCCL_SYM=simple-twoshot $B perf --backend gpu --window --ranks 8 --min 256K --max 256K
    plain "simple pdl=0" OXCCL_SYM=simple-twoshot OXCCL_SYM_PDL=0 $B perf --backend gpu --window --ranks 8 --min 256K --max 256K
    plain "simple ctas=8" OXCCL_SYM=simple-twoshot OXCCL_SYM_CTAS=8 $B perf --backend gpu --window --ranks 8 --min 256K --max 256K
    plain "lamport" OXCCL_SYM=lamport $B perf --backend gpu --window --ranks 8 --min 8 --max 256K --step 32
    plain "classic" OXCCL_SYM=off $B perf --backend gpu --ranks 8 --min 8 --max 256K --step 32
    plain "simple 2 ranks" OXCCL_SYM=simple-twoshot $B perf --backend gpu --window --ranks 2 --min 256K --max 256K
    plain "classic 2 ranks" OXCCL_SYM=off $B perf --backend gpu --ranks 2 --min 256K --max 256K
done
save plain
