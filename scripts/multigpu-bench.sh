#!/usr/bin/env bash
# Multi-GPU check and benchmark of oxccl next to NCCL, in one device call on an
# nvidia-h200-x2 / -x4 / -x8 machine (or, degraded, on the single nvidia-h200):
#
#   scripts/multigpu-bench.sh bundle   (here, no GPU needed)
#       builds the release binary (scripts/gpu-check.sh bundle: cubin from the committed PTX)
#       and gzips it into bundle/oxccl.gz (the device tool carries at most 64 MiB)
#   scripts/multigpu-bench.sh run      (there, from the repository root; results into $OUT)
#   bash -n scripts/multigpu-bench.sh  (syntax check, anywhere)
#
# The device tool's usage:
#   scripts/multigpu-bench.sh bundle
#   device run --kind nvidia-h200-x8 --carry bundle -- scripts/multigpu-bench.sh run
# then copy $OUT's files to benches/results/YYYY-MM-DD-multigpu-<kind>/ (table.md is the
# summary: machine, commit, command, step results, and the oxccl / NCCL table).
#
# What `run` does, with N = the GPUs nvidia-smi lists (R = N ranks, rank r on GPU r;
# with N = 1 it says so and runs the same steps with R = SMOKE_RANKS ranks sharing GPU 0,
# one-process-per-rank steps under MPS; the NCCL comparison then uses 1 rank on both sides,
# since torch's NCCL refuses two ranks on one GPU):
#   machine  nvidia-smi -L, -q, topo -m, nvlink -s; `oxccl info`, `oxccl topo --require-p2p`
#            (fails, naming the devices, if some pair of GPUs cannot reach each other)
#   check    every collective x every dtype x every op, in and out of place, random data,
#            every element of every rank checked against the host reference (counts 0 to
#            65537), R ranks in one process, and R+1 ranks round-robin (two share GPU 0)
#   large    the same at 1000003 elements (bf16, f32, f16, f8e4m3, i32, f64 x sum, max, avg)
#   big      every collective at 16 MiB per rank (bf16, f32 sum)
#   procs    the check matrix (f32, bf16, i8, f64 x sum, max, premulsum, counts 0 to
#            1000003) with one process per GPU (per rank)
#   sym      every symmetric kernel (auto, simple-oneshot, simple-twoshot, ll, lamport,
#            ll-twoshot, lamport-twoshot) x
#            all_reduce / all_gather / reduce_scatter on registered windows, one process
#            (sym, sym-large), then one process per rank (sym-procs)
#   graph    all-reduces captured into CUDA graphs (one graph per GPU) and replayed
#   perf     oxccl perf, all_reduce / all_gather / reduce_scatter x bf16 / f32, MIN..MAX
#            (default 8 B .. 4 GiB, x2 per row; below 32 MiB median of 5 x 20 operations,
#            from 32 MiB of 3 x 5), one process (the slowest rank's time); then all_reduce
#            with one process per GPU (perf-procs, rank 0's time), or in the smoke run R
#            ranks sharing GPU 0 (perf-shared, oxccl only)
#   nccl     scripts/nccl-ref.py: the same collectives, dtypes, sizes and repetitions, one
#            process per GPU
#   compare  scripts/multigpu-compare.py: time, algbw, busbw of both and the ratios per size
#
# Every step runs under `timeout` (its limit in LIMITS below, cut to what is left of
# DEADLINE_S, default 550 s, so the call stays under the 10-minute limit; the correctness
# steps leave the timing steps' limits untouched); a step that runs out is recorded as
# TIMEOUT (SKIPPED when no time is left), the next one starts, and the exit status is 1.
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
# NVSHMEM_DISABLE_NVLS=1, exported for every step (oxccl never calls cuMulticastCreate).
#
# Environment for `run`: STEPS (default "machine check large big procs sym graph perf nccl
# compare"), QUICK=1 (smaller matrices), MIN / MAX (perf sizes), SMOKE_RANKS (default 2),
# DEADLINE_S, BIN (the oxccl binary; default bundle/oxccl.gz unpacked), BACKEND=cpu (a dry
# run of the script's flow on the CPU backend, no GPU: N = DRY_GPUS logical devices, default
# 2; nvidia-smi, graph and NCCL steps are skipped), e.g.
#   BACKEND=cpu BIN=target/release/oxccl QUICK=1 MAX=64K OUT=/tmp/mg scripts/multigpu-bench.sh run
set -uo pipefail
cd "$(dirname "$0")/.."

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

case "${1:-}" in
bundle)
    set -e
    scripts/gpu-check.sh bundle
    gzip -1 -c bundle/oxccl > bundle/oxccl.gz
    rm -f bundle/oxccl
    du -sh bundle
    ;;
run)
    out=${OUT:-multigpu-bench-out}
    mkdir -p "$out"
    t_start=$SECONDS
    deadline=${DEADLINE_S:-550}
    backend=${BACKEND:-gpu}
    if [ -n "${BIN:-}" ]; then
        bin=$BIN
    elif [ -f bundle/oxccl.gz ]; then
        gunzip -c bundle/oxccl.gz > /tmp/oxccl-mg && chmod +x /tmp/oxccl-mg && bin=/tmp/oxccl-mg
    elif [ -x bundle/oxccl ]; then
        bin=bundle/oxccl
    else
        echo "bundle/oxccl.gz missing: run 'scripts/multigpu-bench.sh bundle' first and carry bundle/"
        exit 2
    fi
    commit=$(tr '\n' ' ' < bundle/COMMIT 2>/dev/null || true)
    [ -n "$commit" ] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown) (no bundle/COMMIT)"

    # Per-step limits in seconds (sum 540 with perf-procs; cut to what DEADLINE_S leaves).
    declare -A LIMITS=([machine]=25 [check]=80 [large]=30 [big]=30 [procs]=50 [sym]=35 [sym-large]=25
        [sym-procs]=35 [graph]=20 [perf]=75 [perf-procs]=35 [perf-shared]=35 [nccl]=90 [compare]=10)
    summary="$out/summary.txt"
    : > "$summary"
    status=0
    # step NAME CMD...: run CMD under its time limit, output to $out/NAME.log (and its tail here).
    step() {
        local name=$1; shift
        local left=$((deadline - (SECONDS - t_start) - 10 - reserve))
        local limit=${LIMITS[$name]:-60}
        [ "$limit" -gt "$left" ] && limit=$left
        if [ "$limit" -le 5 ]; then
            printf "%-12s %-8s %5ss  (no time left) %s\n" "$name" SKIPPED 0 "$*" | tee -a "$summary"
            status=1
            return
        fi
        echo "=== $name (limit ${limit}s): $*" > "$out/$name.log"
        echo "=== $name (limit ${limit}s): $*"
        local t0=$SECONDS r
        timeout -k 5 "$limit" "$@" >> "$out/$name.log" 2>&1
        case $? in
            0) r=ok ;;
            124|137) r=TIMEOUT; status=1 ;;
            *) r=FAIL; status=1 ;;
        esac
        tail -n 3 "$out/$name.log"
        printf "%-12s %-8s %5ss  %s\n" "$name" "$r" "$((SECONDS - t0))" "$*" | tee -a "$summary"
    }

    if [ "$backend" = cpu ]; then
        gpus=${DRY_GPUS:-2}
    else
        gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
    fi
    if [ "${gpus:-0}" -ge 2 ]; then
        ranks=$gpus
        tranks=$gpus
        mode="$gpus GPUs: $ranks ranks, rank r on GPU r (one per GPU)"
        shared=0
    else
        gpus=1
        ranks=${SMOKE_RANKS:-2}
        tranks=1
        mode="ONE GPU (smoke run): $ranks ranks sharing GPU 0 in the correctness steps (one-process-per-rank ones under MPS); the oxccl/NCCL timing is of 1 rank on each side (torch's NCCL refuses ranks sharing a GPU), perf-shared times oxccl's $ranks ranks on GPU 0 alone"
        shared=1
    fi
    odd=$((ranks + 1))
    echo "multigpu-bench: $mode; commit $commit; backend $backend" | tee "$out/mode.txt"
    steps=" ${STEPS:-machine check large big procs sym graph perf nccl compare} "
    has() { [[ $steps == *" $1 "* ]]; }
    quick=${QUICK:-0}
    b=(--backend "$backend" --devices all)
    # Time kept for the timing steps while the correctness steps run (their limits), so that
    # slow checks cut themselves short rather than the oxccl / NCCL table.
    reserve=0
    for t in perf nccl compare; do has $t && reserve=$((reserve + ${LIMITS[$t]})); done
    has perf && reserve=$((reserve + ${LIMITS[perf-procs]}))

    # MPS for steps whose processes share one GPU (the smoke run), as scripts/gpu-check.sh.
    mps_on() {
        [ "$shared" = 1 ] && [ "$backend" = gpu ] || return 0
        export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        nvidia-cuda-mps-control -d && echo "mps daemon started" | tee -a "$summary"
    }
    mps_off() {
        [ "$shared" = 1 ] && [ "$backend" = gpu ] || return 0
        echo quit | nvidia-cuda-mps-control && echo "mps daemon stopped" | tee -a "$summary"
        unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    }

    if has machine; then
        if [ "$backend" = gpu ]; then
            { nvidia-smi -L; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; } > "$out/nvidia-smi.txt" 2>&1
            timeout 20 nvidia-smi topo -m > "$out/nvidia-smi-topo.txt" 2>&1
            timeout 20 nvidia-smi nvlink -s > "$out/nvidia-smi-nvlink.txt" 2>&1
            timeout 30 nvidia-smi -q > "$out/nvidia-smi-q.txt" 2>&1
            cat "$out/nvidia-smi.txt" "$out/nvidia-smi-topo.txt"
        fi
        { uname -a; nproc; grep -m1 'model name' /proc/cpuinfo; } > "$out/host.txt" 2>&1
        step machine "$bin" topo --backend "$backend" --devices all --require-p2p
        timeout 30 "$bin" info > "$out/oxccl-info.txt" 2>&1
    fi

    if has check; then
        if [ "$quick" = 1 ]; then
            step check "$bin" check "${b[@]}" --ranks "$ranks" --counts 0,1,7,4099,65537 --dtypes f32,bf16,i8 --ops sum,max
        else
            step check "$bin" check "${b[@]}" --ranks "$ranks,$odd" --counts 0,1,7,31,4099,65537
        fi
    fi
    if has large; then
        step large "$bin" check "${b[@]}" --ranks "$ranks" --counts 1000003 --dtypes bf16,f32,f16,f8e4m3,i32,f64 --ops sum,max,avg
    fi
    if has big; then
        step big "$bin" check "${b[@]}" --bytes --ranks "$ranks" --dtypes bf16,f32 --ops sum --counts 16M
    fi
    if has procs; then
        mps_on
        step procs "$bin" check "${b[@]}" --procs --ranks "$ranks" --counts 0,1,7,4099,65537,1000003 \
            --dtypes f32,bf16,i8,f64 --ops sum,max,premulsum
        mps_off
    fi
    if has sym; then
        # Every symmetric kernel (the seven OXCCL_SYM settings) x all_reduce, all_gather,
        # reduce_scatter x f32, bf16, i32, f8e4m3 x sum, max; 1000003 elements for bf16 sum
        # only (on one H200 8 ranks took 152 s for that count over the whole matrix).
        if [ "$quick" = 1 ]; then
            step sym "$bin" sym-check "${b[@]}" --ranks "$ranks" --counts 1,4099,65537 --dtypes f32,bf16 --ops sum
        else
            step sym "$bin" sym-check "${b[@]}" --ranks "$ranks" --counts 1,7,1000,4099,65537
            step sym-large "$bin" sym-check "${b[@]}" --ranks "$ranks" --counts 1000003 --dtypes bf16 --ops sum
        fi
        mps_on
        step sym-procs "$bin" sym-check "${b[@]}" --procs --ranks "$ranks" --counts 1,4099,65537,1000003 --dtypes f32,bf16 --ops sum
        mps_off
    fi
    if has graph && [ "$backend" = gpu ]; then
        step graph "$bin" graph-check --devices all --ranks "$ranks"
    fi

    lo=${MIN:-8}
    hi=${MAX:-4G}
    colls=all_reduce,all_gather,reduce_scatter
    # bytes SIZE: a K/M/G size in bytes.
    bytes() {
        local s=$1 m=1
        case $s in
            *[kK]) m=1024; s=${s%?} ;;
            *[mM]) m=$((1 << 20)); s=${s%?} ;;
            *[gG]) m=$((1 << 30)); s=${s%?} ;;
        esac
        echo $((s * m))
    }
    # Below 32 MiB 5 x 20 operations a row, from 32 MiB 3 x 5 (the nccl step does the same).
    split=$((32 << 20))
    perf_cmd=()
    if [ "$(bytes "$lo")" -lt "$split" ]; then
        small_hi=$hi
        [ "$(bytes "$hi")" -ge "$split" ] && small_hi=16M
        perf_cmd+=("'$bin' perf ${b[*]} --ranks $tranks --coll $colls --dtype bf16,f32 --op sum --min $lo --max $small_hi --step 2 --iters 20 --reps 5")
    fi
    if [ "$(bytes "$hi")" -ge "$split" ]; then
        big_lo=$lo
        [ "$(bytes "$lo")" -lt "$split" ] && big_lo=32M
        perf_cmd+=("'$bin' perf ${b[*]} --ranks $tranks --coll $colls --dtype bf16,f32 --op sum --min $big_lo --max $hi --step 2 --iters 5 --reps 3")
    fi
    reserve=0
    if has perf; then
        joined=$(printf ' && %s' "${perf_cmd[@]}")
        step perf bash -c "${joined# && }"
        if [ "$shared" = 0 ]; then
            step perf-procs "$bin" perf "${b[@]}" --procs --ranks "$tranks" --coll all_reduce --dtype bf16,f32 --op sum \
                --min "$lo" --max "$hi" --step 2 --iters 10 --reps 3
        else
            shared_hi=$hi
            [ "$(bytes "$hi")" -gt $((256 << 20)) ] && shared_hi=256M
            step perf-shared "$bin" perf "${b[@]}" --ranks "$ranks" --coll "$colls" --dtype bf16 --op sum \
                --min "$lo" --max "$shared_hi" --step 4 --iters 10 --reps 3
        fi
    fi
    if has nccl; then
        if [ "$backend" = gpu ] && python3 -c 'import torch, torch.distributed' 2>/dev/null; then
            step nccl python3 scripts/nccl-ref.py --ranks "$tranks" --gpus "$gpus" --colls "$colls" --dtypes bf16,f32 \
                --min "$lo" --max "$hi" --step 2 --iters 20 --reps 5 --large-from 32M --large-iters 5 --large-reps 3 \
                --csv "$out/nccl.csv"
        else
            printf "%-12s %-8s %5ss  (no torch with CUDA here)\n" nccl SKIPPED 0 | tee -a "$summary"
        fi
    fi
    if has compare; then
        args=()
        for l in perf perf-procs perf-shared; do
            [ -f "$out/$l.log" ] && args+=(--oxccl "${l/perf/oxccl}=$out/$l.log")
        done
        [ -s "$out/nccl.csv" ] && args+=(--nccl "$out/nccl.csv")
        step compare python3 scripts/multigpu-compare.py "${args[@]}" --out "$out/compare.md"
    fi

    # The write-up: machine, commit, command, steps, the table.
    {
        echo "# multigpu-bench: $mode"
        echo
        echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); commit: $commit"
        echo "- command: \`scripts/multigpu-bench.sh run\` (STEPS=\"${STEPS:-default}\" QUICK=$quick MIN=$lo MAX=$hi BACKEND=$backend); total $((SECONDS - t_start)) s"
        echo "- environment: NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST=$TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS=$NVSHMEM_DISABLE_NVLS"
        echo "- timing: oxccl = one process, rank r on GPU r (CUDA events on every rank's stream, the slowest rank's median; sizes below 32 MiB median of 5 x 20 operations, from 32 MiB of 3 x 5); oxccl-procs = one process per GPU (rank 0's median of 3 x 10); oxccl-shared (smoke run only) = $ranks ranks on GPU 0, one process; nccl = torch.distributed's NCCL, one process per GPU, the slowest rank's median, repetitions as oxccl's"
        echo
        echo "## Machine"
        echo
        echo '```'
        cat "$out/nvidia-smi.txt" 2>/dev/null
        echo
        cat "$out/nvidia-smi-topo.txt" 2>/dev/null
        echo
        cat "$out/host.txt" 2>/dev/null
        echo
        sed -n '/^=== machine/,$p' "$out/machine.log" 2>/dev/null | tail -n +2
        echo '```'
        echo
        echo "## Steps (logs: <step>.log)"
        echo
        echo '```'
        cat "$summary"
        for f in "$out"/*.log; do
            [ -f "$f" ] || continue
            grep -hE '^(check|check \(all processes\)|graph-check): ' "$f" | sed "s|^|$(basename "$f" .log): |"
        done
        echo '```'
        echo
        echo "## oxccl and NCCL"
        echo
        cat "$out/compare.md" 2>/dev/null || echo "(no comparison: see compare.log)"
    } > "$out/table.md"
    echo "=== summary ($((SECONDS - t_start)) s)"
    cat "$summary"
    echo "results in $out/ (table.md)"
    exit $status
    ;;
*)
    echo "usage: $0 bundle|run" >&2
    exit 2
    ;;
esac
