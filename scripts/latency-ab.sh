#!/usr/bin/env bash
# Small-message latency of several oxccl builds side by side, in one device call (issue 4):
# each build's graph-replayed all-reduce next to its empty-kernel graph, the builds interleaved
# round by round so that drift hits them alike; the phase timeline of a build made with
# OXCCL_SYM_TIMELINE (device/src/coll/sym/timeline.rs); the ideal CUDA kernel of
# benches/micro/kernel_costs.cu with its own phase table; and a correctness pass of one build.
#
#   here:   build each variant (cargo run -p oxccl-builder, then cargo build --release -p oxccl)
#           and xz it into bundle/oxccl-<name>.xz
#   there:  BINS="base a" TL=t CHECK=a scripts/latency-ab.sh   (device call: carry ["bundle"])
# Knobs: STEPS (default "ab timeline kc check"; "procs" adds a check and latency across
# processes under MPS), ROUNDS (2), SETTINGS ("lamport ll auto"), AB_STEP (size factor of the
# 2-rank sweep, 8), TL_CASES (timeline cases "setting:ranks:size ...", default
# "lamport:1:8 lamport:1:4K lamport:2:8 lamport:2:4K ll:2:8"), CHECK_RANKS (2,8). Logs in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-latency-ab-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
steps=" ${STEPS:-ab timeline kc check} "
for n in ${BINS:-} ${TL:-}; do
    [ -x /tmp/oxccl-$n ] || { xz -dc bundle/oxccl-$n.xz > /tmp/oxccl-$n && chmod +x /tmp/oxccl-$n; }
done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee "$out/summary.log"
perf() { # build, then perf's arguments; the graph rows only
    local b=$1; shift
    echo "== $b: ${OXCCL_SYM:-auto} $*" >> "$out/ab.log"
    timeout 120 /tmp/oxccl-$b perf --backend gpu --dtype f32 --op sum --graph 20 "$@" > /tmp/perf.out 2>&1
    cat /tmp/perf.out >> "$out/ab.log"
    # "<bytes> <kernel> <graph us> <empty us>" per size
    awk -v b="$b" -v s="${OXCCL_SYM:-auto}" -v a="$*" '
        $1 ~ /^[0-9]+K?M?$/ && NF >= 10 { size = $1; algo = $3 }
        /graph replay \| empty/ { printf "%-6s %-8s %-28s %6s %-24s %6s %6s\n", b, s, a, size, algo, $5, $6 }' /tmp/perf.out \
        | tee -a "$out/summary.log"
}
if [[ $steps == *" ab "* ]]; then
    for r in $(seq "${ROUNDS:-2}"); do
        for s in ${SETTINGS:-lamport ll auto}; do
            for b in ${BINS}; do
                OXCCL_SYM=$s perf "$b" --window --ranks 2 --min 8 --max 4K --step "${AB_STEP:-8}"
            done
        done
    done
    for b in ${BINS}; do
        OXCCL_SYM=lamport perf "$b" --window --ranks 1 --min 8 --max 4K --step 512
        OXCCL_SYM=auto perf "$b" --window --ranks 8 --min 8 --max 4K --step 8
    done
fi
if [[ $steps == *" timeline "* && -n ${TL:-} ]]; then
    tl() { # setting, ranks, size
        echo "== timeline OXCCL_SYM=$1 ranks $2 size $3" | tee -a "$out/summary.log" >> "$out/timeline.log"
        OXCCL_SYM=$1 timeout 120 /tmp/oxccl-$TL perf --backend gpu --window --ranks "$2" --dtype f32 --op sum \
            --min "$3" --max "$3" --graph 20 > /tmp/tl.out 2>&1
        cat /tmp/tl.out >> "$out/timeline.log"
        # Medians of each phase (cycles) over the printed ops, per rank.
        python3 - /tmp/tl.out <<'PY' | tee -a "$out/summary.log"
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] == "oxccl-timeline":
        rows.setdefault(f[2], []).append(list(zip(f[8::2], map(int, f[9::2]))))
for r, ops in sorted(rows.items()):
    med = " ".join(f"{name} {statistics.median(op[i][1] for op in ops):.0f}" for i, (name, _) in enumerate(ops[0]))
    print(f"  rank {r} ({len(ops)} ops) median cycles: {med}")
PY
        grep 'graph replay' /tmp/tl.out | tee -a "$out/summary.log"
    }
    for case in ${TL_CASES:-lamport:1:8 lamport:1:4K lamport:2:8 lamport:2:4K ll:2:8}; do
        IFS=: read -r s n sz <<< "$case"
        tl "$s" "$n" "$sz"
    done
fi
if [[ $steps == *" kc "* ]]; then
    { nvcc -O2 -arch=sm_90 benches/micro/kernel_costs.cu -o /tmp/kc && timeout 180 /tmp/kc; } > "$out/kernel-costs.log" 2>&1
    grep -A40 "ideal CUDA" "$out/kernel-costs.log" | tee -a "$out/summary.log"
fi
if [[ $steps == *" check "* && -n ${CHECK:-} ]]; then
    b=/tmp/oxccl-$CHECK
    { timeout 300 $b sym-check --backend gpu --ranks ${CHECK_RANKS:-2,8} --counts 1,7,1000,4099,65537 \
        && timeout 200 $b sym-check --backend gpu --ranks 2 --colls all_reduce --dtypes f32 --ops sum \
            --settings lamport,ll,lamport-twoshot,ll-twoshot,simple-oneshot --counts 1024 --iters 10000; } > "$out/check.log" 2>&1
    echo "check rc=$?" | tee -a "$out/summary.log"
    grep -E "passed|failed|FAIL|error" "$out/check.log" | tail -8 | tee -a "$out/summary.log"
fi
if [[ $steps == *" procs "* && -n ${CHECK:-} ]]; then
    # The same build across processes under MPS: correctness, then latency.
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    nvidia-cuda-mps-control -d || true
    b=/tmp/oxccl-$CHECK
    timeout 200 $b sym-check --backend gpu --procs --ranks 2,4 --counts 1,4099,65537 --dtypes f32,bf16 --ops sum,max \
        > "$out/procs.log" 2>&1
    echo "procs check rc=$?" | tee -a "$out/summary.log"
    grep -E "passed|failed" "$out/procs.log" | tail -3 | tee -a "$out/summary.log"
    for b in ${BINS}; do
        OXCCL_SYM=auto perf "$b" --procs --window --ranks 2 --min 8 --max 32K --step 8
    done
    echo quit | nvidia-cuda-mps-control || true
fi
