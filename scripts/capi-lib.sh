#!/usr/bin/env bash
# Build oxccl's drop-in NCCL library: `cargo build --release -p oxccl-capi` makes
# <target>/release/libnccl.so (its SONAME is libnccl.so.2, set by host/capi/build.rs); this
# script adds the libnccl.so.2 link next to it, which is the name programs linked against
# NCCL (and LD_PRELOAD users) ask for, checks the SONAME and prints both paths.
#
#   scripts/capi-lib.sh            # release build
#   PROFILE=dev scripts/capi-lib.sh  # another cargo profile (dev and test land in target/debug)
#
# The target directory is $CARGO_TARGET_DIR when set, else target/. Link programs with
# `cc -I host/capi/include prog.c -L <target>/release -lnccl -Wl,-rpath,<target>/release`.
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-release}"
target="${CARGO_TARGET_DIR:-target}"
case "$profile" in
    dev | test) dir="$target/debug" ;;
    *) dir="$target/$profile" ;;
esac
cargo build --profile "$profile" -p oxccl-capi
lib="$dir/libnccl.so"
[ -f "$lib" ] || { echo "capi-lib.sh: $lib was not built" >&2; exit 1; }
ln -sfn libnccl.so "$dir/libnccl.so.2"
if command -v readelf >/dev/null; then
    soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
    if [ "$soname" != libnccl.so.2 ]; then
        echo "capi-lib.sh: $lib has SONAME '${soname}', expected libnccl.so.2" >&2
        exit 1
    fi
else
    echo "capi-lib.sh: readelf not found (binutils): SONAME not checked" >&2
fi
echo "$lib"
echo "$dir/libnccl.so.2 -> libnccl.so"
