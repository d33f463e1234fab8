#!/usr/bin/env bash
# Links the Device API test kernel (builder/tests/data/user_kernel.ll, or USER_LL) with the
# exported bitcode ptx/oxccl_device.bc and compiles it to PTX for sm_90:
#   scripts/link-user-kernel.sh OUT.ptx
# then, on a GPU machine: oxccl devapi-run --ptx OUT.ptx --ranks N.
# Needs rustup's llvm-tools (`rustup component add llvm-tools`); checks the result with ptxas
# when found ($OXCCL_PTXAS, .tools/ from scripts/setup-ptxas.sh, /opt/oxccl-ptxas, PATH).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:?usage: scripts/link-user-kernel.sh OUT.ptx}"
user="${USER_LL:-$root/builder/tests/data/user_kernel.ll}"
bc="$root/ptx/oxccl_device.bc"
bin="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin"
for t in llvm-link llc; do
    [ -x "$bin/$t" ] || { echo "link-user-kernel: $t not in $bin: rustup component add llvm-tools" >&2; exit 1; }
done
[ -f "$bc" ] || { echo "link-user-kernel: $bc missing: cargo run -p oxccl-builder" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# --only-needed: take from the library only what the user kernel calls (not the collectives).
"$bin/llvm-link" "$user" --only-needed "$bc" -o "$tmp/linked.bc"
"$bin/llc" -march=nvptx64 -mcpu=sm_90 -mattr=+ptx81 "$tmp/linked.bc" -o "$out"
ptxas="${OXCCL_PTXAS:-}"
for p in "$root/.tools/ptxas/nvidia/cu13/bin/ptxas" /opt/oxccl-ptxas/nvidia/cu13/bin/ptxas "$(command -v ptxas || true)"; do
    [ -n "$ptxas" ] && break
    [ -n "$p" ] && [ -x "$p" ] && ptxas="$p"
done
if [ -n "$ptxas" ]; then
    "$ptxas" -arch=sm_90 -o "$tmp/user.cubin" "$out"
    echo "link-user-kernel: wrote $out (ptxas -arch=sm_90 accepts it)"
else
    echo "link-user-kernel: wrote $out (ptxas not found: not assembled)"
fi
