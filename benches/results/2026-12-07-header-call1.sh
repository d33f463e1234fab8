#!/usr/bin/env bash
# Session 8, call 1: three polls in flight (pp) and no header (nh, measurement only) against
# cur (HEAD 0b880fc); pa = every kernel-argument word read before griddepcontrol.wait (patl its timeline); gg = line loads and stores relaxed.gpu.global (measurement only); timelines with the header mark and poll counts (tl, pptl) at 8 B-4 KiB.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
R=${OUT:-/tmp/ret}; mkdir -p $R; O=/tmp/out; mkdir -p $O
T0=$(date +%s)
save() { echo "$1 done $(( $(date +%s) - T0 )) s" >> $O/progress.txt; cp $O/progress.txt $R/; tar czf $R/logs.tgz -C $O . ; }
for n in cur tl pp pptl nh gg pa patl; do xz -dc bundle/oxccl-$n.xz > /tmp/oxccl-$n && chmod +x /tmp/oxccl-$n; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $O/machine.txt
BINS="cur pp nh gg pa" SETTINGS="lamport ll" ROUNDS=2 AB_STEP=2 STEPS="ab" OUT=$O/ab timeout 280 scripts/latency-ab.sh > $O/ab.out 2>&1
save ab
for b in tl pptl patl; do
  TL=$b TL_CASES="lamport:2:8 lamport:2:64 lamport:2:512 lamport:2:4K ll:2:8 ll:2:4K lamport:8:8 lamport:8:4K" STEPS=timeline \
    OUT=$O/tl-$b timeout 110 scripts/latency-ab.sh > $O/tl-$b.out 2>&1
done
save tl
