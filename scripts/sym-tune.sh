#!/usr/bin/env bash
# The measurements behind the symmetric tuner's table (host/src/coll/sym_table.rs): every
# symmetric kernel forced (OXCCL_SYM) at several CTA counts (OXCCL_SYM_CTAS), all-reduce f32 on
# window buffers, 2 and 8 ranks in one process; mailbox kernels (LL, Lamport, one-shot and
# two-shot) graph-replayed from 8 B to 256 KiB per rank, Simple kernels timed plainly from
# 64 KiB to 256 MiB; the classic kernels on the same sizes for the `auto` rows. Prints, per
# (ranks, size), every kernel's best time and its CTA count.
#
#   run there:  bundle/oxccl must exist (xz-compressed as bundle/oxccl.xz is unpacked by the
#               caller, or pass BIN); logs into $OUT/sym-tune.log, summary $OUT/sym-tune.txt
# Knobs: RANKS (default "2 8"), CTAS (default "1 2 4 8 16 32 64"; 0 = the table's count),
# MAILBOX (kernels), SIMPLE, COLL (all_reduce; all_gather and reduce_scatter time their
# nccl-tests size, ranks x the payload per rank), DTYPE (f32), STEP (4), MB_MIN / MB_MAX (the
# mailbox sizes, 8 / 256K), SIMPLE_MIN / SIMPLE_MAX (64K / 256M), SIMPLE_GRAPH (set: graph-
# replay the Simple and classic kernels too), CLASSIC (1; 0 skips the classic kernels).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-sym-tune-out}; mkdir -p "$out"
log=$out/sym-tune.log; : > "$log"
b=${BIN:-/tmp/oxccl}
export NCCL_NVLS_ENABLE=0
mailbox=${MAILBOX:-ll lamport ll-twoshot lamport-twoshot}
simple=${SIMPLE:-simple-oneshot simple-twoshot}
run() { # tag ("ranks kernel ctas"), then the command; writes "tag bytes time(us)" per size
    # (the graph-replayed time where there is one) and the raw output as comments
    local tag=$1; shift
    timeout 120 "$@" 2>&1 | awk -v t="$tag" '
        /^ +[0-9]+[KMG]? +[0-9]+ / { if (b != "") print t, b, v; b = $1; v = $(NF-6); print "#", $0; next }
        /graph replay/ { v = $5 }
        { print "#", $0 }
        END { if (b != "") print t, b, v }' >> "$log"
}
common="--backend gpu --coll ${COLL:-all_reduce} --dtype ${DTYPE:-f32} --op sum --step ${STEP:-4}"
mb="--min ${MB_MIN:-8} --max ${MB_MAX:-256K} --graph 20"
sp="--min ${SIMPLE_MIN:-64K} --max ${SIMPLE_MAX:-256M}${SIMPLE_GRAPH:+ --graph 20}"
for n in ${RANKS:-2 8}; do
    for k in $mailbox; do for c in ${CTAS:-1 2 4 8 16 32 64}; do
        OXCCL_SYM=$k OXCCL_SYM_CTAS=$c run "$n $k $c" $b perf $common --window --ranks $n $mb
    done; done
    for k in $simple; do for c in ${CTAS:-1 2 4 8 16 32 64}; do
        OXCCL_SYM=$k OXCCL_SYM_CTAS=$c run "$n $k $c" $b perf $common --window --ranks $n $sp
    done; done
    if [ "${CLASSIC:-1}" = 1 ]; then
        run "$n classic 0" $b perf $common --ranks $n $mb
        run "$n classic 0" $b perf $common --ranks $n $sp
    fi
done
# Summary: for each ranks and size, every kernel's best time (us) and the CTAs that gave it.
awk '$1 !~ /^#/ && NF == 5 { key = $1 " " $4; k = $2; t = $5 + 0; if (!((key, k) in best) || t < best[key, k]) { best[key, k] = t; at[key, k] = $3 }; keys[key] = 1; kern[k] = 1 }
     END { printf "%-6s %-10s", "ranks", "bytes"; for (k in kern) printf " %22s", k; printf "\n";
           for (key in keys) { split(key, p, " "); printf "%-6s %-10s", p[1], p[2];
             for (k in kern) { if ((key, k) in best) printf " %15.2f (x%-3s)", best[key, k], at[key, k]; else printf " %22s", "-" } printf "\n" } }' \
    "$log" | sort -k1,1n -k2,2 > "$out/sym-tune.txt"
cat "$out/sym-tune.txt"
