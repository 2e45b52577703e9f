#!/bin/sh
# run_bench_peers.sh — bench_fusion's optional peers (issue 15): the JAX / tinygrad twins' inputs and
# parameters are bit-identical to the torch twins', an absent peer is reported and shown as n/a, and
# the peer table marks a checksum mismatch (tests/parity/bench_peers_check.py). Needs neither JAX
# nor tinygrad. When /usr/bin/python3 cannot import torch and numpy the test prints why and passes.
# Prints `PASS name` / `FAIL name: why` lines.
cd "$(dirname "$0")/.." || exit 1
PY=${TORCH_PYTHON:-/usr/bin/python3}
if ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "PASS bench_peers_skipped ($PY cannot import torch and numpy: install python3-torch to run it)"
    exit 0
fi
exec "$PY" tests/parity/bench_peers_check.py
