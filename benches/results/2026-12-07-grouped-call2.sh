#!/usr/bin/env bash
# Session 10, call 2: the committed rule (grouped from 7 ranks in one process, up to 32 KiB)
# off against auto on 8 ranks in one process and across processes under MPS; then the
# symmetric tuner's rows (host/src/coll/sym_table.rs, measured on an H100) checked on this
# GPU: Lamport against LL and the classic kernels at small sizes on 2, 4 and 8 ranks;
# Lamport against the Simple two-shot at 64-256 KiB on 2-8 ranks (all-reduce) and 2, 4-8
# ranks (all-gather, reduce-scatter); Lamport's CTA rule (the table's count against half and
# twice it) at 8, 32 and 128 KiB on 2 and 8 ranks; the Simple two-shot against the classic
# kernels from 256 KiB to 256 MiB, timed plainly.
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/call-lib.sh
call_init final
for g in off auto; do
    OXCCL_SYM_GROUPED=$g perf_rows final "g=$g" --window --ranks 8 --min 8 --max 32K --step 8
done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d || true
for g in off auto; do
    OXCCL_SYM_GROUPED=$g perf_rows final "g=$g procs" --procs --window --ranks 8 --min 8 --max 4K --step 8
done
echo quit | nvidia-cuda-mps-control || true
save grouped
for n in 2 4 8; do
    for s in lamport ll; do OXCCL_SYM=$s perf_rows final "$s" --window --ranks $n --min 8 --max 128K --step 4; done
    perf_rows final classic --ranks $n --min 8 --max 128K --step 4
done
save small
for n in 2 3 4 5 6 7 8; do
    for s in lamport simple-twoshot; do OXCCL_SYM=$s perf_rows final "$s" --window --ranks $n --min 64K --max 256K --step 2; done
done
save crossover
for c in all_gather reduce_scatter; do
    for n in 2 4 5 6 7 8; do
        # perf sizes these by the whole output (input): n x the payload per rank
        for s in lamport simple; do OXCCL_SYM=$s perf_rows final "$s" --window --coll $c --ranks $n --min $((n * 64))K --max $((n * 256))K --step 2; done
    done
done
save crossover-ag-rs
for n in 2 8; do
    for sz in 8K 32K 128K; do
        for c in 1 2 4 8 16 32 64; do
            OXCCL_SYM=lamport OXCCL_SYM_CTAS=$c perf_rows final "lamport x$c" --window --ranks $n --min $sz --max $sz
        done
    done
done
save ctas
for n in 2 8; do
    OXCCL_SYM=simple-twoshot timeout 120 /tmp/oxccl-final perf --backend gpu --dtype f32 --op sum --window --ranks $n \
        --min 256K --max 256M --step 16 > /tmp/p.out 2>&1; { echo "== simple-twoshot plain $n"; cat /tmp/p.out; } >> $O/plain.log
    timeout 120 /tmp/oxccl-final perf --backend gpu --dtype f32 --op sum --ranks $n \
        --min 256K --max 256M --step 16 > /tmp/p.out 2>&1; { echo "== classic plain $n"; cat /tmp/p.out; } >> $O/plain.log
done
save plain
