#!/usr/bin/env bash
# Session 7, call 1: entry-overlap variants A/B, their checks, timeline, tuner gaps.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
R=${OUT:-/tmp/ret}; mkdir -p $R; O=/tmp/out; mkdir -p $O
save() { echo "$1 done $(( $(date +%s) - T0 )) s" >> $O/progress.txt; cp $O/progress.txt $R/; tar czf $R/logs.tgz -C $O . ; }
T0=$(date +%s)
for n in base v1 v2 t2; do xz -dc bundle/oxccl-$n.xz > /tmp/oxccl-$n && chmod +x /tmp/oxccl-$n; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $O/machine.txt
# 1. latency A/B, interleaved rounds; timeline of t2 (= v2 + phase marks); checks of v2
BINS="base v1 v2" TL=t2 CHECK=v2 SETTINGS="lamport ll" ROUNDS=3 CHECK_RANKS=2,3,8 \
  STEPS="ab timeline check procs" OUT=$O/ab timeout 330 scripts/latency-ab.sh > $O/ab.out 2>&1
save ab
# 2. tuner gaps, on v2
B=/tmp/oxccl-v2
for coll in all_gather reduce_scatter; do
  COLL=$coll RANKS="2 4 8" MAILBOX=lamport SIMPLE=simple-oneshot CTAS=0 STEP=2 MB_MIN=16K MB_MAX=2M \
    SIMPLE_MIN=16K SIMPLE_MAX=2M SIMPLE_GRAPH=1 BIN=$B OUT=$O/tune-$coll timeout 150 scripts/sym-tune.sh > /dev/null 2>&1
  save $coll
done
RANKS="5 6 7" MAILBOX=lamport SIMPLE=simple-twoshot CTAS=0 STEP=2 MB_MIN=16K MB_MAX=256K SIMPLE_MIN=16K \
  SIMPLE_MAX=256K SIMPLE_GRAPH=1 CLASSIC=0 BIN=$B OUT=$O/tune-ar567 timeout 100 scripts/sym-tune.sh > /dev/null 2>&1
save ar567
for s in 80K 96K 112K; do
  RANKS=8 MAILBOX=lamport SIMPLE=simple-twoshot CTAS=0 MB_MIN=$s MB_MAX=$s SIMPLE_MIN=$s SIMPLE_MAX=$s \
    SIMPLE_GRAPH=1 CLASSIC=0 BIN=$B OUT=$O/tune-ar8-$s timeout 40 scripts/sym-tune.sh > /dev/null 2>&1
done
save ar8
DTYPE=i32 RANKS="2 8" MAILBOX=lamport SIMPLE=" " CTAS="0 4 8 16 32 64" STEP=4 MB_MIN=8K MB_MAX=128K CLASSIC=0 \
  BIN=$B OUT=$O/tune-i32 timeout 90 scripts/sym-tune.sh > /dev/null 2>&1
save i32
