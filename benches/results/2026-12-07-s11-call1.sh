#!/usr/bin/env bash
# Session 11, call 1, on the build of this session's device code (Simple placement check,
# symmetric error records) and host code:
# 1. sym-check (every OXCCL_SYM setting, 2 and 8 ranks, one process);
# 2. ranks running ahead: sym-check --ahead 16 (16 operations in flight per batch, each on
#    buffers of its own, no wait between them), 10,000 all-reduces per setting on 2 and 8
#    ranks, all-gather / reduce-scatter on 8, and across 2 processes under MPS;
# 3. what the host pays to enqueue one collective (`oxccl perf --host`) against the
#    driver's floor for an empty kernel (benches/micro/launch_cost.cu);
# 4. scripts/grouped-procs-probe.sh (prepared in session 10).
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/call-lib.sh
call_init final
B=/tmp/oxccl-final
run() { # name, args...: the tool's output into $O/NAME.log, its status appended
    local n=$1; shift
    timeout 300 "$@" > $O/$n.log 2>&1; echo "exit $?" >> $O/$n.log
}
run check $B sym-check --backend gpu --ranks 2,8 --dtypes f32,bf16 --ops sum,max
# Small-op latency (graph replay against the empty-kernel floor), for comparison with
# session 10's H200 figures (2026-12-07-grouped-h200.md): the Sum kernels' registers moved.
for n in 2 8; do
    OXCCL_SYM=lamport perf_rows final "lamport" --window --ranks $n --min 8 --max 4K --step 8
done
save check
for n in 2 8; do
    run ahead-ar-$n $B sym-check --backend gpu --ranks $n --ahead 16 --iters 10000 --colls all_reduce --dtypes f32 --ops sum \
        --settings lamport,ll,lamport-twoshot,ll-twoshot,simple-oneshot,simple-twoshot --counts 1024
done
run ahead-agrs-8 $B sym-check --backend gpu --ranks 8 --ahead 16 --iters 2000 --colls all_gather,reduce_scatter --dtypes bf16 --ops sum \
    --settings auto,lamport,ll,simple --counts 1000
export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d || true
run ahead-procs $B sym-check --backend gpu --procs --ranks 2 --ahead 16 --iters 2000 --colls all_reduce,all_gather --dtypes f32 --ops sum \
    --settings lamport,ll,simple-twoshot --counts 1024
echo quit | nvidia-cuda-mps-control || true
save ahead
nvcc -O2 -arch=sm_90 benches/micro/launch_cost.cu -lcuda -o /tmp/lc > $O/launch-cost.log 2>&1 && /tmp/lc >> $O/launch-cost.log 2>&1
host_rows() { # label, env..., then perf args after --
    local l=$1; shift
    local e=()
    while [ "$1" != -- ]; do e+=("$1"); shift; done
    shift
    echo "== $l" >> $O/host.log
    env "${e[@]}" timeout 120 $B perf --backend gpu --dtype f32 --op sum --host --reps 9 "$@" > /tmp/h.out 2>&1
    grep -E "^ +[0-9]+[KM]? +[0-9]+ |host per call|rror" /tmp/h.out >> $O/host.log
}
for n in 1 2 8; do
    for s in lamport ll simple-twoshot; do
        host_rows "$s $n" OXCCL_SYM=$s -- --window --ranks $n --min 8 --max 256K --step 32768
    done
    host_rows "classic $n" OXCCL_SYM=off -- --ranks $n --min 8 --max 256K --step 32768
    host_rows "lamport pdl=0 $n" OXCCL_SYM=lamport OXCCL_SYM_PDL=0 -- --window --ranks $n --min 8 --max 8
done
/tmp/lc >> $O/launch-cost.log 2>&1
save hostcost
bash scripts/grouped-procs-probe.sh
