#!/bin/sh
# run_torch_parity.sh — parity with PyTorch (issue 4): stitch trains the 784-256-128-10 MLP for 20 SGD
# and 20 Adam steps (tests/parity/mlp_parity.lua, writing its initial weights, batches, final SGD
# weights as safetensors and its losses as text into a temp dir); PyTorch (Debian's python3-torch,
# for /usr/bin/python3) replays the same steps from those files and compares (mlp_parity.py):
# losses within 1e-4 relative, final SGD weights within 1e-4 absolute.
# When /usr/bin/python3 cannot import torch the test prints why and passes (CI installs it).
# Prints `PASS name` / `FAIL name: why` lines; BUILD (default build) names the build directory.
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
PY=${TORCH_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "PASS torch_parity_skipped ($PY cannot import torch: install python3-torch to run it)"
    exit 0
fi
if [ ! -x "$BUILD/stitch" ]; then
    echo "FAIL torch_parity: no $BUILD/stitch (build it first)"
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! "$BUILD/stitch" tests/parity/mlp_parity.lua "$tmp" > "$tmp/stitch.log" 2>&1; then
    echo "FAIL torch_parity_stitch_run: $(tail -n 5 "$tmp/stitch.log")"
    exit 1
fi
"$PY" tests/parity/mlp_parity.py "$tmp"
