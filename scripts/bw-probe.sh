#!/usr/bin/env bash
# What bounds the 8-rank all-gather at 256 MiB (issue 3: 0.845x of the copy): the pure-write and
# copy bandwidth of this GPU measured with torch in the same call, the all-gather (and, for
# comparison, the reduce-scatter) under several per-rank block caps, then the two-process
# all-reduce without windows (staged) next to NCCL 2.32.3's 128 MiB figure, and finally the
# quick correctness matrix of the classic kernels.
#
#   build here:  cargo build --release -p oxccl && gzip -1 -c target/release/oxccl > bundle/oxccl.gz
#   run there:   bash scripts/bw-probe.sh      (device call: carry ["bundle"]); logs in $OUT
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-bw-probe-out}; mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
b=bundle/oxccl
if [ ! -x "$b" ]; then
    gunzip -c bundle/oxccl.gz > /tmp/oxccl-bw && chmod +x /tmp/oxccl-bw && b=/tmp/oxccl-bw
fi
log=$out/bw-probe.log
probe() { echo "== $*" | tee -a "$log"; timeout 120 "$@" 2>&1 | tee -a "$log"; }
probe python3 - <<'PY'
import torch
def t(f, n=20):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    f(); torch.cuda.synchronize(); ts = []
    for _ in range(n):
        s.record(); f(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e) * 1e3)
    return sorted(ts)[n // 2]
for gib in (0.25, 2.0):
    n = int(gib * 2**30) // 2
    x, y = torch.empty(n, dtype=torch.bfloat16, device="cuda"), torch.empty(n, dtype=torch.bfloat16, device="cuda")
    b = n * 2
    w = t(lambda: x.fill_(1.0)); c = t(lambda: y.copy_(x)); r = t(lambda: x.sum())
    print(f"{gib} GiB: write-only {b / w / 1e3:.0f} GB/s ({w:.1f} us), copy r+w {2 * b / c / 1e3:.0f} GB/s ({c:.1f} us), "
          f"read-only (sum) {b / r / 1e3:.0f} GB/s ({r:.1f} us)")
PY
for cap in 16 32 64; do
    for c in all_gather reduce_scatter; do
        OXCCL_MAX_BLOCKS=$cap probe "$b" perf --backend gpu --coll $c --ranks 8 --dtype bf16 --op sum --min 256M --max 256M
    done
done
export CUDA_MPS_PIPE_DIRECTORY=/tmp/oxccl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/oxccl-mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d || true
probe "$b" perf --backend gpu --procs --ranks 2 --dtype f32 --op sum --min 16M --max 128M --step 8
echo quit | nvidia-cuda-mps-control || true
unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
echo "== check" | tee -a "$log"; timeout 330 "$b" check --backend gpu --ranks 1,2,3,8 --counts 0,1,7,4099,65537 > "$out/check.log" 2>&1; echo "rc=$?"; tail -3 "$out/check.log"; grep -c "^FAIL" "$out/check.log"
