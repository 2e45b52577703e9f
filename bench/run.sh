#!/bin/sh
# run.sh — run every benchmark and print the ratio lines (bench/NOTES.md says what they mean).
#   sh bench/run.sh [--quick]      (BUILD=build by default; `make bench` from the top runs this)
# Order: machine baselines and stitch (bench_bw), numpy (spawned here, same machine, right after),
# op-record overhead from C and from Lua, the training step in stitch and PyTorch (bench_train.*).
# Each writes `key value` lines; report.py (bench_train.py --report for the training step) prints ratios.
# The kernel cache is a fresh temporary directory so the cold run really compiles (its time is
# reported apart from the warm runs). Total time: about 20 s (--quick: ~6 s).
cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
QUICK=$1
out=$(mktemp -d)
ST_CACHE_DIR=$out/cache
export ST_CACHE_DIR
# Timed iterations run compiled kernels: the first run waits for the compiler (ST_JIT_ASYNC=0)
# instead of interpreting while it works in the background.
export ST_JIT_ASYNC=0
unset ST_EAGER ST_DEBUG ST_POISON

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(date -u +%Y-%m-%dT%H:%MZ)"
# Other work on these 2 cores skews every number: the load average is printed before and after.
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== bench_bw (stitch, memcpy, hand-written loops) =="
"$BUILD/bench/bench_bw" "$out/bw.txt" $QUICK || echo "bench_bw failed (status $?)"

# numpy: the first python3 on PATH that has it, else the system one.
PY=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import numpy' 2>/dev/null; then PY=$p; break; fi
done
echo "== numpy =="
if [ -n "$PY" ]; then
    "$PY" bench/bench_numpy.py "$out/np.txt" $QUICK || echo "bench_numpy failed (status $?)"
else
    echo "no python3 with numpy: numpy ratios skipped"
fi

"$BUILD/bench/bench_matmul" "$out/mm.txt" $QUICK || echo "bench_matmul failed (status $?)"

echo "== op-record overhead =="
"$BUILD/bench/bench_record" "$out/rec.txt" $QUICK || echo "bench_record failed (status $?)"
if [ -x "$BUILD/stitch" ]; then
    "$BUILD/stitch" bench/record.lua "$out/lua.txt" $QUICK || echo "record.lua failed (status $?)"
else
    echo "no $BUILD/stitch: Lua record benchmark skipped"
fi

# Training step (issue 4): stitch's MLP step, then PyTorch's right after (Debian's python3-torch is
# installed for /usr/bin/python3 only); the ratios are printed in the ratio section below.
echo "== training step: stitch vs PyTorch CPU (bench_train) =="
TPY=/usr/bin/python3
if [ -x "$BUILD/stitch" ]; then
    "$BUILD/stitch" bench/bench_train.lua "$out/train.txt" $QUICK || echo "bench_train.lua failed (status $?)"
    # the 1-thread twin (keys train_1t_*): PyTorch's bench times 1 thread too; see NOTES.md
    ST_THREADS=1 "$BUILD/stitch" bench/bench_train.lua "$out/train_1t.txt" $QUICK || echo "bench_train.lua (1 thread) failed (status $?)"
else
    echo "no $BUILD/stitch: training benchmark skipped"
fi
if "$TPY" -c 'import torch' 2>/dev/null; then
    "$TPY" bench/bench_train.py "$out/train_torch.txt" $QUICK || echo "bench_train.py failed (status $?)"
else
    echo "$TPY cannot import torch (install python3-torch): PyTorch training numbers skipped"
fi

echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "== ratios =="
PYR=${PY:-python3}
"$PYR" bench/report.py "$out/bw.txt" "$out/np.txt" "$out/rec.txt" "$out/lua.txt"
"$PYR" bench/bench_train.py --report "$out/train_torch.txt" "$out/train.txt" "$out/train_1t.txt"
rm -rf "$out"
