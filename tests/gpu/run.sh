#!/bin/sh
# gpu/run.sh — `make test-gpu`, on a machine with an NVIDIA GPU: the op suite, the C suites of the
# CUDA paths and the Lua tests on the CUDA device (ST_DEVICE=cuda: every tensor is created there,
# every kernel runs there), and the differential fuzzer with its fused run on the GPU against the
# reference interpreter on the CPU. Last line: "N passed, N failed". See docs/cuda.md for building
# on a machine without -dev packages.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.." || exit 1
export ST_CACHE_DIR=${ST_CACHE_DIR:-$(mktemp -d)}
export ST_JIT_ASYNC=${ST_JIT_ASYNC:-0}   # as tests/run.sh
"$BUILD"/tests/test_cuda_driver > /dev/null 2>&1
if ! ST_DEVICE=cuda "$BUILD"/stitch -e 'assert(st.device():match("^cuda"), "no GPU: " .. st.device())' 2>/dev/null; then
    echo "test-gpu: no usable GPU here:"; ST_DEVICE=cuda "$BUILD"/stitch -e 'print(st.device())'
    echo "0 passed, 1 failed"; exit 1
fi
log=$(mktemp)
pass=0; fail=0
run() { # name, command...
    name=$1; shift
    start=$(date +%s)
    "$@" > "$log" 2>&1; rc=$?
    p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
    grep '^FAIL ' "$log" | head -40
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then echo "FAIL $name: exited with status $rc"; tail -n 20 "$log"; f=1; fi
    echo "  $name: $p passed, $f failed ($(( $(date +%s) - start ))s)"
    pass=$((pass + p)); fail=$((fail + f))
}
run test_cuda_driver "$BUILD"/tests/test_cuda_driver
run test_ops env ST_DEVICE=cuda "$BUILD"/tests/test_ops
run test_opmath env ST_DEVICE=cuda "$BUILD"/tests/test_opmath   # the GPU's math = the CPU's, bit for bit
run test_fuzz "$BUILD"/tests/test_fuzz --device cuda --graphs ${GRAPHS:-2000}
run test_autograd env ST_DEVICE=cuda "$BUILD"/tests/test_autograd
# the C suites of the CUDA paths (as make test-sim runs them on the simulated GPU)
for t in test_epilogue test_prologue test_device test_horizontal test_fusion_counts test_cuda_counts test_mma; do
    run $t env ST_DEVICE=cuda "$BUILD/tests/$t"
done
for t in tests/lua/test_*.lua; do run "$(basename "$t")" env ST_DEVICE=cuda "$BUILD"/stitch "$t"; done
rm -f "$log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
