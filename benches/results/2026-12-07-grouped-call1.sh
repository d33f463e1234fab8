#!/usr/bin/env bash
# Session 10, call 1: the grouped kernels (oxccl_sym_{ll,lamport}_grouped_<type>,
# OXCCL_SYM_GROUPED) in one build: off against auto on 7 and 8 ranks (all-reduce, all-gather,
# reduce-scatter, interleaved over two rounds), Lamport at 16 KiB-1 MiB on 8 ranks off against
# on (where the size cap should sit), on against off on 2, 3 and 5 ranks (the predicted
# loss); then checks with the grouped kernels forced on: sym-check (2, 5, 8 ranks), soaks of
# 10,000 ops on 8 ranks, sym-mismatch (its grouped cases included), and 8 ranks across
# processes under MPS.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/call-lib.sh
call_init grouped
B=/tmp/oxccl-grouped
for round in 1 2; do
    for g in off auto; do
        export OXCCL_SYM_GROUPED=$g
        perf_rows grouped "g=$g" --window --ranks 8 --min 8 --max 4K --step 8
        perf_rows grouped "g=$g" --window --ranks 7 --min 8 --max 4K --step 8
        perf_rows grouped "g=$g" --window --coll all_gather --ranks 8 --min 64 --max 32K --step 8
        perf_rows grouped "g=$g" --window --coll reduce_scatter --ranks 8 --min 64 --max 32K --step 8
    done
    save "round $round"
done
for g in off on; do
    export OXCCL_SYM_GROUPED=$g
    OXCCL_SYM=lamport perf_rows grouped "g=$g lamport" --window --ranks 8 --min 16K --max 256K --step 2
    for n in 2 3 5; do perf_rows grouped "g=$g" --window --ranks $n --min 8 --max 4K --step 8; done
done
save sizes
export OXCCL_SYM_GROUPED=on
timeout 150 $B sym-check --backend gpu --ranks 2,5,8 --settings ll,lamport,auto \
    --counts 1,7,1000,4099,16385 > $O/check.log 2>&1; echo "rc=$?" >> $O/check.log
save check
for c in all_reduce all_gather reduce_scatter; do
    timeout 60 $B sym-check --backend gpu --ranks 8 --colls $c --dtypes f32 --ops sum --settings lamport,ll \
        --counts 1024 --iters 10000 >> $O/soak.log 2>&1; echo "$c rc=$?" >> $O/soak.log
done
save soak
timeout 90 $B sym-mismatch --backend gpu > $O/mismatch.log 2>&1; echo "rc=$?" >> $O/mismatch.log
save mismatch
export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d || true
timeout 100 $B sym-check --backend gpu --procs --ranks 8 --settings ll,lamport --counts 1,4099,16385 \
    --dtypes f32,bf16 > $O/procs.log 2>&1; echo "rc=$?" >> $O/procs.log
save procs
for g in off auto; do OXCCL_SYM_GROUPED=$g perf_rows grouped "g=$g procs" --procs --window --ranks 8 --min 8 --max 4K --step 8; done
echo quit | nvidia-cuda-mps-control || true
save procs-perf
