#!/usr/bin/env bash
# Session 9, call 2: cur (7881d42) against mhh (mh4's grouped polling from 6 ranks up, one
# peer after the other below): 1, 2, 3, 5-8 ranks, all-gather and reduce-scatter, 8- and
# 4-rank Lamport at 64-256 KiB; checks of mhh (sym-check 2,6,8 ranks; sym-mismatch).
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
R=${OUT:-/tmp/ret}; mkdir -p $R; O=/tmp/out; mkdir -p $O
T0=$(date +%s)
save() { echo "$1 done $(( $(date +%s) - T0 )) s" >> $O/progress.txt; cp $O/progress.txt $R/; tar czf $R/logs.tgz -C $O . ; }
for n in cur mhh; do xz -dc bundle/oxccl-$n.xz > /tmp/oxccl-$n && chmod +x /tmp/oxccl-$n; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $O/machine.txt
BINS="cur mhh" SETTINGS="lamport ll" ROUNDS=2 AB_STEP=8 STEPS="ab" OUT=$O/ab timeout 120 scripts/latency-ab.sh > $O/ab.out 2>&1
save ab
p() { # build, setting, perf args: "graph us / empty us" per size into more.log
    local b=$1 s=$2; shift 2
    echo "== $b $s $*" >> $O/more-full.log
    OXCCL_SYM=$s timeout 60 /tmp/oxccl-$b perf --backend gpu --dtype f32 --op sum --graph 20 --window "$@" > /tmp/p.out 2>&1
    cat /tmp/p.out >> $O/more-full.log
    awk -v b="$b" -v s="$s" -v a="$*" '$1 ~ /^[0-9]+K?M?$/ && NF >= 10 { size = $1; algo = $3 }
        /graph replay \| empty/ { printf "%-4s %-8s %-44s %6s %-16s %6s %6s\n", b, s, a, size, algo, $5, $6 }' /tmp/p.out >> $O/more.log
}
for b in cur mhh; do
  for n in 3 5 6 7; do p $b auto --ranks $n --min 8 --max 4K --step 8; done
  for c in all_gather reduce_scatter; do p $b auto --coll $c --ranks 8 --min 64 --max 32K --step 8; p $b auto --coll $c --ranks 2 --min 16 --max 8K --step 8; done
  p $b lamport --ranks 8 --min 64K --max 256K --step 2
  p $b lamport --ranks 4 --min 128K --max 256K --step 2
done; save more
timeout 60 /tmp/oxccl-mhh sym-mismatch --backend gpu > $O/mismatch-mhh.log 2>&1; echo "rc=$?" >> $O/mismatch-mhh.log
save mismatch
timeout 120 /tmp/oxccl-mhh sym-check --backend gpu --ranks 2,6,8 --counts 1,7,1000,4099,65537 > $O/check-mhh.log 2>&1; echo "rc=$?" >> $O/check-mhh.log
save check
