#!/usr/bin/env bash
# Installs ptxas (CUDA 13.0, from the pinned PyPI wheel nvidia-cuda-nvcc==13.0.88) into
# <workspace>/.tools/ptxas, where oxccl-builder looks for it. Idempotent: does nothing when
# it is already there. Prints the path of ptxas.
#
# usage: scripts/setup-ptxas.sh [WORKSPACE]   (default: the folder above this script)
set -euo pipefail

WHEEL="nvidia-cuda-nvcc==13.0.88"
WORKSPACE="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
DEST="$WORKSPACE/.tools/ptxas"
PTXAS="$DEST/nvidia/cu13/bin/ptxas"

if [ ! -x "$PTXAS" ]; then
    echo "installing $WHEEL into $DEST" >&2
    # --no-deps: ptxas is self-contained; the wheel's dependencies (nvvm, crt, runtime) are
    # not needed and are not pinned.
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --target "$DEST" "$WHEEL" >&2
    if [ ! -x "$PTXAS" ]; then
        echo "error: $WHEEL installed but $PTXAS is missing" >&2
        exit 1
    fi
fi
"$PTXAS" --version >/dev/null
echo "$PTXAS"
