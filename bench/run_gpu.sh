#!/bin/sh
# run_gpu.sh — the GPU benchmarks. Issue 3: stitch (bench_cuda), then PyTorch on the same device
# right after (bench_cuda.py), then the ratio lines (bench_cuda.py --report; NOTES.md, "CUDA").
# Issue 5: bench_fusion.py --device cuda --no-ablation (fusion cases vs PyTorch eager and
# torch.compile, fraction of a device copy; NOTES.md, "Fusion depth", "On a GPU").
#   sh bench/run_gpu.sh [--quick] [--fusion-only]   (BUILD=build by default; `make -C bench gpu`)
# --fusion-only skips the issue-3 part (each takes a few minutes; a GPU session's commands may be
# capped at 10 minutes). Without a GPU every part says so and is skipped; the script exits 0.
# bench_cuda makes its own fresh kernel cache directory (the cold call really compiles).
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
export ST_JIT_ASYNC=0   # timed runs use compiled kernels (bench/run.sh)
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
QUICK=""
FUSION_ONLY=""
for a in "$@"; do
    case $a in
        --quick) QUICK=--quick ;;
        --fusion-only) FUSION_ONLY=1 ;;
        *) echo "run_gpu.sh: unknown argument $a (--quick, --fusion-only)"; exit 2 ;;
    esac
done
out=$(mktemp -d)
unset ST_EAGER ST_DEBUG ST_POISON ST_DEVICE ST_NVRTC_CHECK

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(date -u +%Y-%m-%dT%H:%MZ)"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv,noheader 2>/dev/null
fi
echo "== bench_cuda (stitch, device copy) =="
if [ -n "$FUSION_ONLY" ]; then
    echo "skipped (--fusion-only)"
elif [ -x "$BUILD/bench/bench_cuda" ]; then
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
if [ -n "$FUSION_ONLY" ]; then
    echo "skipped (--fusion-only)"
elif grep -q '^cuda_skipped ' "$out/st.txt" 2>/dev/null; then
    echo "no GPU: PyTorch GPU numbers skipped"
elif [ -n "$PY" ]; then
    "$PY" bench/bench_cuda.py "$out/torch.txt" $QUICK || echo "bench_cuda.py failed (status $?)"
else
    echo "no python3 with torch: PyTorch ratios skipped"
fi

if [ -z "$FUSION_ONLY" ]; then
    echo "== ratios =="
    "${PY:-python3}" bench/bench_cuda.py --report "$out/st.txt" "$out/torch.txt"
fi

# bench_fusion.py prints "no CUDA device: ..." and exits 0 when torch sees no GPU, and exits 1
# when torch sees one but stitch does not (its message says so).
echo "== fusion depth on the GPU (bench_fusion.py --device cuda --no-ablation) =="
if [ -z "$PY" ]; then
    echo "no python3 with torch: fusion GPU benchmarks skipped"
elif [ ! -x "$BUILD/stitch" ]; then
    echo "no $BUILD/stitch (make PORTABLE=1): fusion GPU benchmarks skipped"
else
    "$PY" bench/bench_fusion.py --device cuda --no-ablation --build "$BUILD" $QUICK ||
        echo "bench_fusion.py --device cuda failed (status $?)"
fi
rm -rf "$out"
