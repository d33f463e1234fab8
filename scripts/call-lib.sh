#!/usr/bin/env bash
# Helpers for the scripts of one device call (benches/results/*-call*.sh), sourced by them
# from the repository root:
#   call_init NAME...   unpack bundle/oxccl-NAME.xz to /tmp/oxccl-NAME (executable), start
#                       the progress clock, record the GPU in $O/machine.txt
#   save STEP           note STEP's end time and pack every log so far into $R (what comes
#                       back, even if a later step runs past the call's limit)
#   perf_rows NAME LABEL ARGS...
#                       `oxccl perf --backend gpu --dtype f32 --op $PERF_OP (default sum) --graph 20 ARGS` of
#                       build NAME (the environment as set by the caller); the whole output
#                       into $O/perf-full.log, and per size one line "NAME LABEL ARGS size
#                       kernel graph-us empty-us" into $O/perf.log
# $R is $OUT (the device tool's return folder) or /tmp/ret; $O (/tmp/out) holds the logs.
R=${OUT:-/tmp/ret}
O=${O:-/tmp/out}
mkdir -p "$R" "$O"
export NCCL_NVLS_ENABLE=0
T0=$(date +%s)

call_init() {
    local n
    for n in "$@"; do
        xz -dc "bundle/oxccl-$n.xz" > "/tmp/oxccl-$n" && chmod +x "/tmp/oxccl-$n"
    done
    nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader > "$O/machine.txt"
}

save() {
    echo "$1 done $(( $(date +%s) - T0 )) s" >> "$O/progress.txt"
    cp "$O/progress.txt" "$R/"
    tar czf "$R/logs.tgz" -C "$O" .
}

perf_rows() {
    local b=$1 label=$2
    shift 2
    echo "== $b $label $*" >> "$O/perf-full.log"
    timeout 90 "/tmp/oxccl-$b" perf --backend gpu --dtype f32 --op "${PERF_OP:-sum}" --graph 20 "$@" > /tmp/perf.out 2>&1
    cat /tmp/perf.out >> "$O/perf-full.log"
    awk -v b="$b" -v l="$label" -v a="$*" '$1 ~ /^[0-9]+K?M?$/ && NF >= 10 { size = $1; algo = $3 }
        /graph replay \| empty/ { printf "%-8s %-14s %-46s %6s %-22s %6s %6s\n", b, l, a, size, algo, $5, $6 }' \
        /tmp/perf.out >> "$O/perf.log"
}
