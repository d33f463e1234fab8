#!/usr/bin/env bash
# GPU run of the symmetric-window work (issue 4) on one H200, in one device call:
#   build here:  cargo build --release -p oxccl && cargo test --release -p oxccl --test window_gpu --no-run
#                scripts/sym-gpu.sh bundle      (gzips both binaries into bundle/: the carry limit is 64 MiB)
#   run there:   scripts/sym-gpu.sh run         (logs into $OUT)
# Steps (STEPS, default all): windows = tests/window_gpu.rs (CUDA VMM windows, multi-segment,
# two processes passing descriptors); check = sym-check in one process, 2/3/4/8 ranks (CHECK_RANKS,
# sizes CHECK_COUNTS);
# procs = sym-check one process per rank under MPS (2, 4, 8); soak = 10,000 back-to-back
# all-reduces per kernel on 2 and 8 ranks (SOAK_SETTINGS), all-gathers and reduce-scatters per
# protocol on 2; latency = CUDA-graph replay per operation next to the same graph with empty
# kernels, 8 B .. 1 MiB, 2 and 8 ranks, every kernel forced (LATENCY_SETTINGS); bw = 256 MiB
# on 8 ranks and 128 MiB f32 on 2 ranks (in-process and under MPS) next to a D2D copy, the
# Simple window kernels forced (BW_SYM).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
bundle)
    mkdir -p bundle
    rm -f bundle/oxccl bundle/window_gpu bundle/*.gz
    gzip -1 -c target/release/oxccl > bundle/oxccl.gz
    wg=$(ls -t target/release/deps/window_gpu-* | grep -v '\.d$' | head -1)
    gzip -1 -c "$wg" > bundle/window_gpu.gz
    git rev-parse HEAD > bundle/COMMIT
    git diff --quiet || echo "(+ uncommitted changes)" >> bundle/COMMIT
    du -sh bundle
    ;;
run)
    out=${OUT:-sym-gpu-out}; mkdir -p "$out"
    export NCCL_NVLS_ENABLE=0
    # bundle/NAME as it is (unpacked by scripts/device-run.sh), else bundle/NAME.gz
    for f in oxccl window_gpu; do
        if [ -x bundle/$f ]; then cp bundle/$f /tmp/$f; else gunzip -c bundle/$f.gz > /tmp/$f; fi; chmod +x /tmp/$f
    done
    b=/tmp/oxccl
    cat bundle/COMMIT
    steps=" ${STEPS:-windows check procs soak latency bw} "
    st=0
    run() { local name=$1; shift; echo "=== $name: $*" | tee -a "$out/$name.log"; local t0=$SECONDS;
            if "$@" >> "$out/$name.log" 2>&1; then r=ok; else r=FAIL; st=1; fi
            tail -3 "$out/$name.log"; echo "$name $r $((SECONDS - t0))s" | tee -a "$out/summary.txt"; }
    if [[ $steps == *" windows "* ]]; then run windows /tmp/window_gpu --nocapture --test-threads=1; fi
    if [[ $steps == *" check "* ]]; then
        run check $b sym-check --backend gpu --ranks ${CHECK_RANKS:-2,3,4,8} --counts ${CHECK_COUNTS:-1,7,1000,4099,65537,1000003}
    fi
    if [[ $steps == *" soak "* ]]; then
        run soak $b sym-check --backend gpu --ranks 2,8 --colls all_reduce --dtypes f32 --ops sum \
            --settings ${SOAK_SETTINGS:-lamport,ll,lamport-twoshot,ll-twoshot,simple-oneshot,simple-twoshot} --counts 1024 --iters 10000
        run soak-ag-rs $b sym-check --backend gpu --ranks 2 --colls all_gather,reduce_scatter --dtypes bf16 --ops sum \
            --settings lamport,ll,simple --counts 1024 --iters 10000
    fi
    if [[ $steps == *" latency "* ]]; then
        for n in 2 8; do for s in ${LATENCY_SETTINGS:-auto lamport ll lamport-twoshot ll-twoshot simple-oneshot}; do
            OXCCL_SYM=$s run latency-$n-$s $b perf --backend gpu --window --ranks $n --dtype f32 --op sum \
                --min 8 --max 1M --step 2 --graph 20
        done; done
        run latency-2-classic $b perf --backend gpu --ranks 2 --dtype f32 --op sum --min 8 --max 1M --step 2 --graph 20
    fi
    if [[ $steps == *" bw "* ]]; then
        for c in all_reduce all_gather reduce_scatter; do
            OXCCL_SYM=${BW_SYM:-simple} run bw-8-$c $b perf --backend gpu --window --coll $c --ranks 8 --dtype bf16 --op sum --min 256M --max 256M
        done
        OXCCL_SYM=${BW_SYM:-simple} run bw-2-f32 $b perf --backend gpu --window --ranks 2 --dtype f32 --op sum --min 16M --max 128M --step 8
    fi
    if [[ $steps == *" procs "* ]]; then
        export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
        mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
        nvidia-cuda-mps-control -d || true
        run procs-check $b sym-check --backend gpu --procs --ranks 2,4,8 --counts 1,4099,65537 --dtypes f32,bf16 --ops sum
        run procs-latency $b perf --backend gpu --procs --window --ranks 2 --dtype f32 --op sum --min 8 --max 32K --step 8 --graph 20
        run procs-bw $b perf --backend gpu --procs --window --ranks 2 --dtype f32 --op sum --min 16M --max 128M --step 8
        echo quit | nvidia-cuda-mps-control || true
    fi
    cat "$out/summary.txt"
    exit $st
    ;;
*) echo "usage: $0 bundle|run"; exit 2 ;;
esac
