#!/usr/bin/env bash
# Session 7, call 2: the final build (new) against base, its checks, the Lamport CTA cap.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0
R=${OUT:-/tmp/ret}; mkdir -p $R; O=/tmp/out; mkdir -p $O
T0=$(date +%s)
save() { echo "$1 done $(( $(date +%s) - T0 )) s" >> $O/progress.txt; cp $O/progress.txt $R/; tar czf $R/logs.tgz -C $O . ; }
for n in base new; do xz -dc bundle/oxccl-$n.xz > /tmp/oxccl-$n && chmod +x /tmp/oxccl-$n; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > $O/machine.txt
# 1. latency, interleaved; sym-check 2/3/8 ranks + 10,000-op soaks; under MPS: sym-check 2/4 processes, latency
BINS="base new" CHECK=new SETTINGS="lamport ll" ROUNDS=2 CHECK_RANKS=2,3,8 STEPS="ab check procs" \
  OUT=$O/ab timeout 300 scripts/latency-ab.sh > $O/ab.out 2>&1
save ab
# 2. the new table's larger Lamport sizes (5 and 8 ranks), checked
timeout 150 /tmp/oxccl-new sym-check --backend gpu --ranks 5,8 --counts 28672,28673,65536 --settings auto,lamport \
  --dtypes f32,bf16,i32 --ops sum,max > $O/check-sizes.log 2>&1; echo "rc=$?" >> $O/check-sizes.log
save sizes
# 3. window_gpu, devapi-run (1-8 ranks), the classic collectives (gpu-check matrix)
PARTS="sym devapi gpucheck" SYM_STEPS="windows" GPUCHECK_STEPS="matrix" PART_LIMIT_gpucheck=200 \
  OUT=$O/dr timeout 330 scripts/device-run.sh run > $O/dr.out 2>&1
save device-run
# 4. Lamport CTA counts at 128-256 KiB, f32 and i32
RANKS="2 4 8" MAILBOX=lamport SIMPLE=" " CTAS="16 32 64" MB_MIN=256K MB_MAX=256K CLASSIC=0 BIN=/tmp/oxccl-new \
  OUT=$O/cta-f32 timeout 60 scripts/sym-tune.sh > /dev/null 2>&1
DTYPE=i32 RANKS="2 4 8" MAILBOX=lamport SIMPLE=" " CTAS="0 32 64" MB_MIN=128K MB_MAX=256K STEP=2 CLASSIC=0 \
  BIN=/tmp/oxccl-new OUT=$O/cta-i32 timeout 80 scripts/sym-tune.sh > /dev/null 2>&1
save cta
