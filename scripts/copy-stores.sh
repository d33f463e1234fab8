#!/usr/bin/env bash
# Cache policy of the copy collectives' stores (OXCCL_COPY_STORES=wb|cs) on one GPU, in one
# device call: the fan-out microbenchmark (benches/micro/fanout.cu, what the 8-rank all-gather's
# traffic reaches written directly in CUDA), then oxccl's 8-rank all-gather, all-to-all and
# broadcast at 256 MiB with write-back and with streaming stores, alternated (run order ABAB...)
# so that clock or thermal drift does not favour one side; then the quick correctness matrix with
# the streaming kernel (copy collectives) and with the default.
#
#   build here:  cargo build --release -p oxccl && scripts/copy-stores.sh bundle
#   run there:   scripts/copy-stores.sh run      (device call: carry ["bundle"]); logs in $OUT
# Knobs: ROUNDS (default 3) pairs of all-gather runs per dtype; NO_MICRO=1 skips the CUDA part.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
bundle)
    mkdir -p bundle
    xz -T0 -6 -c target/release/oxccl > bundle/oxccl.xz   # the tree that travels (ptx/ included) must stay under 64 MiB
    { git rev-parse HEAD; git diff --quiet || echo "(+ uncommitted changes)"; } > bundle/COMMIT
    du -sh bundle
    ;;
run)
    out=${OUT:-copy-stores-out}; mkdir -p "$out"
    log=$out/copy-stores.log
    export NCCL_NVLS_ENABLE=0
    b=/tmp/oxccl-cs
    if [ -x bundle/oxccl ]; then cp bundle/oxccl $b; else xz -dc bundle/oxccl.xz > $b; fi; chmod +x $b
    say() { echo "$*" | tee -a "$log"; }
    say "=== copy-stores $(date -u +%FT%TZ); bundle: $(tr '\n' ' ' < bundle/COMMIT 2>/dev/null || echo '?')"
    say "$(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader)"
    st=0
    probe() { local lim=$1; shift; say "== $*"; timeout "$lim" "$@" >> "$log" 2>&1 || { say "(rc=$?)"; st=1; }; }
    if [ "${NO_MICRO:-0}" != 1 ]; then
        probe 60 nvcc -O3 -arch=sm_90 benches/micro/fanout.cu -o /tmp/fanout
        probe 60 /tmp/fanout
    fi
    perf() { say "== OXCCL_COPY_STORES=$1 --coll $2 --dtype $3"; OXCCL_COPY_STORES=$1 probe 60 $b perf --backend gpu --coll $2 --ranks 8 --dtype $3 --op sum --min 256M --max 256M; }
    for dt in bf16 f32; do
        for _ in $(seq "${ROUNDS:-3}"); do perf wb all_gather $dt; perf cs all_gather $dt; done
    done
    for c in all_to_all broadcast; do perf wb $c bf16; perf cs $c bf16; done
    say "== summary: collective dtype policy time(us) ratio-to-copy"
    awk '/^== OXCCL_COPY_STORES=/ { split($2, a, "="); pol = a[2]; c = $0; sub(/.*--coll /, "", c); sub(/ .*/, "", c);
                                    d = $0; sub(/.*--dtype /, "", d); sub(/ .*/, "", d) }
         /^ +256M/ && pol != "" { printf "%s %s %s %s %s\n", c, d, pol, $4, $NF; pol = "" }' "$log" | tee -a "$log.summary"
    cat "$log.summary" >> "$log"
    OXCCL_COPY_STORES=cs probe 200 $b check --backend gpu --ranks 1,2,3,8 \
        --colls broadcast,all_gather,all_to_all,gather,scatter,all_gather_v --counts 0,1,7,4099,65537
    [ "${DEFAULT_CHECK:-1}" = 1 ] && probe 200 $b check --backend gpu --ranks 1,2,3,8 --counts 0,1,7,4099,65537
    grep -E "^check|passed|FAIL" "$log" | tail -8
    exit $st
    ;;
*) echo "usage: $0 bundle|run"; exit 2 ;;
esac
