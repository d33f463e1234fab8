#!/usr/bin/env bash
# Session 7, call 3: pre-wait prefetch (v5) against new; the all-gather's and reduce-scatter's 5-7 rank rows.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
R=${OUT:-/tmp/ret}; mkdir -p $R; O=/tmp/out; mkdir -p $O
T0=$(date +%s)
save() { echo "$1 done $(( $(date +%s) - T0 )) s" >> $O/progress.txt; cp $O/progress.txt $R/; tar czf $R/logs.tgz -C $O . ; }
for n in new v5; do xz -dc bundle/oxccl-$n.xz > /tmp/oxccl-$n && chmod +x /tmp/oxccl-$n; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $O/machine.txt
BINS="new v5" CHECK=v5 SETTINGS="lamport ll" ROUNDS=2 CHECK_RANKS=2,8 STEPS="ab check procs" \
  OUT=$O/ab timeout 300 scripts/latency-ab.sh > $O/ab.out 2>&1
save ab
for coll in all_gather reduce_scatter; do for n in 5 6 7; do
  COLL=$coll RANKS=$n MAILBOX=lamport SIMPLE=simple-oneshot CTAS=0 STEP=2 MB_MIN=$((64 * n))K MB_MAX=$((256 * n))K \
    SIMPLE_MIN=$((64 * n))K SIMPLE_MAX=$((256 * n))K SIMPLE_GRAPH=1 CLASSIC=0 BIN=/tmp/oxccl-new \
    OUT=$O/tune-$coll-$n timeout 40 scripts/sym-tune.sh > /dev/null 2>&1
done; done
save tune
