#!/bin/sh
# run.sh — run every test program and print the totals; the last line is "N passed, N failed".
#   sh tests/run.sh [c|lua]   (c: the C test programs only, lua: tests/lua/test_*.lua only; make
#                              test-c, make test-lua)
# Each program prints `PASS name` / `FAIL name: why` lines; a program that crashes or exits non-zero
# without printing a FAIL line counts as one failure of its own.
BUILD=${BUILD:-build}
ONLY=${1:-}
cd "$(dirname "$0")/.." || exit 1
log=$(mktemp)
total_pass=0
total_fail=0
run() { # name, command...
    name=$1; shift
    start=$(date +%s)
    "$@" > "$log" 2>&1
    rc=$?
    p=$(grep -c '^PASS ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    grep '^FAIL ' "$log"
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "FAIL $name: exited with status $rc"; tail -n 20 "$log"; f=1
    fi
    echo "  $name: $p passed, $f failed ($(( $(date +%s) - start ))s)"
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
}
export ST_CACHE_DIR=${ST_CACHE_DIR:-$(mktemp -d)}
# Every test runs on the CPU (GPU runs: tests/gpu/run.sh). In the plain build every kernel the suite
# lowers is also rendered as CUDA C and compiled by NVRTC for sm_80 and sm_90a (jit/nvrtc_check.c;
# the fuzzer: its first NVRTC_GRAPHS graphs); the sanitizer pass skips that (NVRTC is not
# instrumented, and the plain pass covers it).
export ST_DEVICE=${ST_DEVICE:-cpu}
# Kernels compile before their region runs (ST_JIT_ASYNC=0): what a test compares is the compiled
# kernel, never the interpreter standing in while a background compile runs (test_jit_async.lua
# checks that mode in child processes).
export ST_JIT_ASYNC=${ST_JIT_ASYNC:-0}
case "$BUILD" in
    */san) export ST_NVRTC_CHECK=${ST_NVRTC_CHECK:-0} ;;
    *) export ST_NVRTC_CHECK=${ST_NVRTC_CHECK:-1} ;;
esac
nvlog=$(mktemp)
export ST_NVRTC_CHECK_LOG="$nvlog"

for t in "$BUILD"/tests/test_*; do
    [ "$ONLY" = lua ] && break
    [ -x "$t" ] || continue
    case "$t" in
    */test_fuzz)
        # NVRTC needs ~40 ms per kernel and architecture: the 2000 graphs (~10,000 kernels) run on
        # the CPU alone, and the first NVRTC_GRAPHS of them again with every kernel compiled by NVRTC.
        run test_fuzz env ST_NVRTC_CHECK=0 "$t"
        [ "$ST_NVRTC_CHECK" = 1 ] && run test_fuzz_nvrtc "$t" --graphs "${NVRTC_GRAPHS:-300}" ;;
    *) run "$(basename "$t")" "$t" ;;
    esac
done
for t in tests/lua/test_*.lua; do
    [ "$ONLY" = c ] && break
    [ -f "$t" ] || continue
    run "$(basename "$t")" "$BUILD/stitch" "$t"
done
if [ -n "$ONLY" ]; then
    rm -f "$log" "$nvlog"
    echo "$total_pass passed, $total_fail failed"
    [ "$total_fail" -eq 0 ]
    exit
fi
run check_layers sh tools/check_layers.sh "$BUILD"
run check_ops sh tools/check_ops.sh "$BUILD"
for t in tests/lua/run_*.sh tests/run_*.sh; do
    [ -f "$t" ] || continue
    run "$(basename "$t")" env BUILD="$BUILD" sh "$t"
done
if [ "$ST_NVRTC_CHECK" = 1 ]; then
    # one line "compiled failed" per test process (kernels are deduplicated within a process only)
    set -- $(awk '{c += $1; f += $2} END {print c + 0, f + 0}' "$nvlog")
    if [ "$2" -gt 0 ]; then echo "FAIL nvrtc_check: $2 CUDA kernels failed to compile (see the logs above)"; total_fail=$((total_fail + 1))
    elif [ "$1" -gt 0 ]; then echo "PASS nvrtc_check: $1 CUDA kernels compiled for sm_80 and sm_90a"; total_pass=$((total_pass + 1))
    else echo "  nvrtc_check: skipped (no libnvrtc)"; fi
fi
# The suites again on the simulated GPU (tests/sim/run.sh; `make test` builds it with `make sim`).
# Not under the sanitizers (the plain pass covers it), and only where the simulator was built.
case "$BUILD" in
*/san) ;;
*)  if [ -f "$BUILD/sim/libcuda.so.1" ] && [ -f "$BUILD/sim/libnvrtc.so" ]; then
        start=$(date +%s)
        BUILD="$BUILD" sh tests/sim/run.sh > "$log" 2>&1
        grep -v ' passed, .* failed$' "$log" | grep -v '^  sim .*: [0-9]* passed, 0 failed' | head -60
        grep '^  sim ' "$log"
        set -- $(tail -n 1 "$log" | awk '{print $1 + 0, $3 + 0}')
        echo "  test-sim: $1 passed, $2 failed ($(( $(date +%s) - start ))s)"
        total_pass=$((total_pass + $1)); total_fail=$((total_fail + $2))
        run sim_mutations sh tests/sim/mutate.sh
    else
        echo "  test-sim: skipped (the simulator is not built: make sim)"
    fi ;;
esac
rm -f "$log" "$nvlog"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
