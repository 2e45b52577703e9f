#!/bin/sh
# run_torch_load.sh — PyTorch's weights into stitch and back (issue 14 item 6), with Debian's
# /usr/bin/python3 and python3-torch: tests/parity/torch_nn_models.py builds seven small models
# in PyTorch (fresh weights, seed 1), writes their state_dicts, inputs and outputs to a safetensors
# file (json + struct: no safetensors package needed); tests/lua/test_nn_torch_load.lua loads each
# into the same stitch model with load_state_dict(sd, {from = "torch"}), compares the outputs
# (1e-5) and saves state_dict({to = "torch"}); PyTorch loads those back with strict=True and checks
# every tensor and the outputs again. The committed file tests/parity/torch_nn_models.safetensors
# (seed 0) lets test_nn_torch_load.lua run without torch (tests/run.sh runs it with the Lua tests).
# Prints PASS/FAIL lines; passes with a note when /usr/bin/python3 cannot import torch.
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
PY=${TORCH_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "PASS torch_load_skipped ($PY cannot import torch: install python3-torch to run it)"
    exit 0
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
if ! "$PY" tests/parity/torch_nn_models.py write "$tmp/models.safetensors" 1 > "$tmp/py.log" 2>&1; then
    echo "FAIL torch_load_write: $(tail -n 5 "$tmp/py.log")"
    exit 1
fi
mkdir "$tmp/back"
rc=0
"$BUILD/stitch" tests/lua/test_nn_torch_load.lua "$tmp/models.safetensors" "$tmp/back" || rc=1
"$PY" tests/parity/torch_nn_models.py check "$tmp/models.safetensors" "$tmp/back" || rc=1
exit $rc
