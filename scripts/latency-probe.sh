#!/usr/bin/env bash
# Where the small-message latency of the all-reduce goes (issue 4): the same graph-replayed
# operation, next to its empty-kernel graph, on 1 rank (no peer: what a kernel costs without
# any communication), 2 and 8 ranks, for every window protocol and for the classic LL kernel.
# Differences between rows place the time: 1 rank vs empty = the kernel's own cost; 2 ranks vs
# 1 rank = the exchange.
#
#   build here:  cargo build --release -p oxccl && gzip -1 -c target/release/oxccl > bundle/oxccl.gz
#   run there:   bash scripts/latency-probe.sh     (device call: carry ["bundle"]); log in $OUT
# Knobs: RANKS (default "1 2 8"), SETTINGS (default "lamport ll simple-oneshot"), SIZES as
# perf's --min/--max/--step (default "8 4K 512": 8 B and 4 KiB).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-latency-probe-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
b=bundle/oxccl
if [ ! -x "$b" ]; then
    gunzip -c bundle/oxccl.gz > /tmp/oxccl-probe && chmod +x /tmp/oxccl-probe && b=/tmp/oxccl-probe
fi
log=$out/latency-probe.log
read -r min max step <<< "${SIZES:-8 4K 512}"
probe() {
    echo "== $*" | tee -a "$log"
    timeout 60 "$@" 2>&1 | tee -a "$log"
}
for n in ${RANKS:-1 2 8}; do
    for s in ${SETTINGS:-lamport ll simple-oneshot}; do
        OXCCL_SYM=$s probe "$b" perf --backend gpu --window --ranks "$n" --dtype f32 --op sum \
            --min "$min" --max "$max" --step "$step" --graph 20
    done
    probe "$b" perf --backend gpu --ranks "$n" --dtype f32 --op sum --min "$min" --max "$max" --step "$step" --graph 20
done
