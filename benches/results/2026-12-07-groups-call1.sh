#!/usr/bin/env bash
# Session 9, call 1: cur (7881d42) against mh4 (every peer of a line polled in one round, up
# to 4 peers at once, global thread 0's headers polled in the same rounds as its first data
# lines; mh8, 8 at once, spills and was not built); 2-8 ranks, all-gather and reduce-scatter,
# 8-rank Lamport to 256 KiB; checks of mh4 (sym-check 2,3,8 ranks, soaks, across processes,
# sizes) and the GPU mismatch cases (sym-mismatch) on both.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
R=${OUT:-/tmp/ret}; mkdir -p $R; O=/tmp/out; mkdir -p $O
T0=$(date +%s)
save() { echo "$1 done $(( $(date +%s) - T0 )) s" >> $O/progress.txt; cp $O/progress.txt $R/; tar czf $R/logs.tgz -C $O . ; }
for n in ${BINS_ALL:-cur mh4}; do xz -dc bundle/oxccl-$n.xz > /tmp/oxccl-$n && chmod +x /tmp/oxccl-$n; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $O/machine.txt
for b in cur mh4; do
  timeout 90 /tmp/oxccl-$b sym-mismatch --backend gpu > $O/mismatch-$b.log 2>&1; echo "rc=$?" >> $O/mismatch-$b.log
done
save mismatch
BINS="cur mh4" SETTINGS="lamport ll" ROUNDS=2 AB_STEP=4 STEPS="ab" OUT=$O/ab timeout 170 scripts/latency-ab.sh > $O/ab.out 2>&1
save ab
p() { # build, setting, perf args: "graph us / empty us" per size into more.log
    local b=$1 s=$2; shift 2
    echo "== $b $s $*" >> $O/more-full.log
    OXCCL_SYM=$s timeout 60 /tmp/oxccl-$b perf --backend gpu --dtype f32 --op sum --graph 20 --window "$@" > /tmp/p.out 2>&1
    cat /tmp/p.out >> $O/more-full.log
    awk -v b="$b" -v s="$s" -v a="$*" '$1 ~ /^[0-9]+K?M?$/ && NF >= 10 { size = $1; algo = $3 }
        /graph replay \| empty/ { printf "%-4s %-8s %-44s %6s %-16s %6s %6s\n", b, s, a, size, algo, $5, $6 }' /tmp/p.out >> $O/more.log
}
more() { for b in cur mh4; do
  for n in 3 4 5; do p $b auto --ranks $n --min 8 --max 4K --step 8; done
  for c in all_gather reduce_scatter; do p $b auto --coll $c --ranks 8 --min 64 --max 32K --step 8; p $b auto --coll $c --ranks 2 --min 16 --max 8K --step 8; done
  p $b lamport --ranks 8 --min 64K --max 256K --step 2
  p $b lamport --ranks 4 --min 128K --max 256K --step 2
done; save more-$1; }
BINS="cur mh4" CHECK=mh4 CHECK_RANKS=2,3,8 STEPS="check procs" OUT=$O/check-mh4 timeout 240 scripts/latency-ab.sh > $O/check-mh4.out 2>&1
save check-mh4
b=/tmp/oxccl-mh4
timeout 150 $b sym-check --backend gpu --ranks 5,8 --counts 28672,28673,65536 --settings auto,lamport \
  --dtypes f32,bf16,i32 --ops sum,max > $O/check-sizes.log 2>&1; echo "rc=$?" >> $O/check-sizes.log
save sizes
more 1
