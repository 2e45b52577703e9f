#!/bin/sh
# run_gpu.sh — the GPU benchmarks (issue 3): stitch (bench_cuda), then PyTorch on the same device
# right after (bench_cuda.py), then the ratio lines (bench_cuda.py --report; NOTES.md, "CUDA").
#   sh bench/run_gpu.sh [--quick]      (BUILD=build by default; `make -C bench gpu BUILD=../build`)
# Without a GPU, bench_cuda says so and is skipped, and so is PyTorch; the script still exits 0.
# bench_cuda makes its own fresh kernel cache directory (the cold call really compiles).
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
QUICK=$1
out=$(mktemp -d)
unset ST_EAGER ST_DEBUG ST_POISON ST_DEVICE ST_NVRTC_CHECK

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(date -u +%Y-%m-%dT%H:%MZ)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader 2>/dev/null
fi
echo "== bench_cuda (stitch, device copy) =="
if [ -x "$BUILD/bench/bench_cuda" ]; then
    "$BUILD/bench/bench_cuda" "$out/st.txt" $QUICK || echo "bench_cuda failed (status $?)"
else
    echo "no $BUILD/bench/bench_cuda (make -C bench progs BUILD=$BUILD): stitch GPU numbers skipped"
fi

# PyTorch: the first python3 that imports torch (a GPU machine's torch may live in a venv on PATH).
PY=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' 2>/dev/null; then PY=$p; break; fi
done
echo "== PyTorch (bench_cuda.py) =="
if grep -q '^cuda_skipped ' "$out/st.txt" 2>/dev/null; then
    echo "no GPU: PyTorch GPU numbers skipped"
elif [ -n "$PY" ]; then
    "$PY" bench/bench_cuda.py "$out/torch.txt" $QUICK || echo "bench_cuda.py failed (status $?)"
else
    echo "no python3 with torch: PyTorch ratios skipped"
fi

echo "== ratios =="
"${PY:-python3}" bench/bench_cuda.py --report "$out/st.txt" "$out/torch.txt"
rm -rf "$out"
