#!/bin/sh
# run.sh — run every test program and print the totals; the last line is "N passed, N failed".
#   sh tests/run.sh [c|lua]   (c: the C test programs only, lua: tests/lua/test_*.lua only; make
#                              test-c, make test-lua)
# Each program prints `PASS name` / `FAIL name: why` lines; a program that crashes or exits non-zero
# without printing a FAIL line counts as one failure of its own.
# JOBS programs run at a time (default: the online CPUs; JOBS=1 runs them one after the other). A
# line "  name: N passed, N failed (Ns)" is printed as each ends; the FAIL lines and the log's tail
# of a program that failed are printed together after all have ended, in the programs' order.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1

# one NAME: runs the program NAME (a name from `tasks` below) with its output in $RUN_OUT/NAME.log;
# writes "passed failed" to NAME.counts and its failures to NAME.fail. xargs runs it.
if [ "${1:-}" = --one ]; then
    name=$2
    log="$RUN_OUT/$name.log"
    start=$(date +%s)
    case "$name" in
    # The fuzzer's FUZZ_GRAPHS graphs from seed FUZZ_SEED (default 2000 from 1). NVRTC needs ~40 ms
    # per kernel and architecture: with the check on, the first NVRTC_GRAPHS of them (default 300)
    # run with every kernel also compiled by NVRTC (test_fuzz_nvrtc) and the rest on the CPU alone
    # (test_fuzz); each graph runs once.
    test_fuzz)
        seed=$FUZZ_SEED n=$FUZZ_GRAPHS
        if [ "$ST_NVRTC_CHECK" = 1 ]; then seed=$((seed + NVRTC_GRAPHS)) n=$((n - NVRTC_GRAPHS)); fi
        env ST_NVRTC_CHECK=0 "$BUILD/tests/test_fuzz" --seed "$seed" --graphs "$n" ;;
    test_fuzz_nvrtc) "$BUILD/tests/test_fuzz" --seed "$FUZZ_SEED" --graphs "$NVRTC_GRAPHS" ;;
    test_*.lua) "$BUILD/stitch" "tests/lua/$name" ;;
    test_*) "$BUILD/tests/$name" ;;
    check_layers) sh tools/check_layers.sh "$BUILD" ;;
    check_ops) sh tools/check_ops.sh "$BUILD" ;;
    run_module_test.sh|run_repl_test.sh) env BUILD="$BUILD" sh "tests/lua/$name" ;;
    run_*.sh) env BUILD="$BUILD" sh "tests/$name" ;;
    sim_mutations) sh tests/sim/mutate.sh ;;
    *) echo "FAIL $name: no such test (tests/run.sh)" ;;
    esac > "$log" 2>&1
    rc=$?
    p=$(grep -c '^PASS ' "$log")
    f=$(grep -c '^FAIL ' "$log")
    grep '^FAIL ' "$log" > "$RUN_OUT/$name.fail"
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
        { echo "FAIL $name: exited with status $rc"; tail -n 20 "$log"; } >> "$RUN_OUT/$name.fail"; f=1
    fi
    echo "$p $f" > "$RUN_OUT/$name.counts"
    echo "  $name: $p passed, $f failed ($(( $(date +%s) - start ))s)"
    exit 0
fi

ONLY=${1:-}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 1)}
RUN_OUT=$(mktemp -d)
export RUN_OUT BUILD
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
FUZZ_SEED=${FUZZ_SEED:-1} FUZZ_GRAPHS=${FUZZ_GRAPHS:-2000} NVRTC_GRAPHS=${NVRTC_GRAPHS:-300}
[ "$NVRTC_GRAPHS" -le "$FUZZ_GRAPHS" ] || NVRTC_GRAPHS=$FUZZ_GRAPHS
export FUZZ_SEED FUZZ_GRAPHS NVRTC_GRAPHS
nvlog=$(mktemp)
export ST_NVRTC_CHECK_LOG="$nvlog"
# a kernel one program checked is not compiled again by the others (jit/nvrtc_check.c)
nvseen=$(mktemp -d)
export ST_NVRTC_CHECK_SEEN="$nvseen"

# The programs, in the order their failures are reported.
tasks=
if [ "$ONLY" != lua ]; then
    for t in "$BUILD"/tests/test_*; do
        [ -x "$t" ] || continue
        tasks="$tasks $(basename "$t")"
        [ "$(basename "$t")" = test_fuzz ] && [ "$ST_NVRTC_CHECK" = 1 ] && tasks="$tasks test_fuzz_nvrtc"
    done
fi
if [ "$ONLY" != c ]; then
    for t in tests/lua/test_*.lua; do [ -f "$t" ] && tasks="$tasks $(basename "$t")"; done
fi
if [ -z "$ONLY" ]; then
    tasks="$tasks check_layers check_ops"
    for t in tests/lua/run_*.sh tests/run_*.sh; do [ -f "$t" ] && tasks="$tasks $(basename "$t")"; done
fi
# Started longest first (their times on a 2-core machine, plain pass: test_fuzz ~340 s, the NVRTC
# fuzz ~180 s, test_ops ~135 s, ...), so that no long one starts last while the others are done.
first="test_fuzz test_fuzz_nvrtc test_ops test_autograd test_colred run_fuzz_files.sh test_prologue"
first="$first test_oom.lua test_tensor_ops.lua test_fuzz_ops.lua test_nn.lua"
order=
for t in $first; do case " $tasks " in *" $t "*) order="$order $t" ;; esac; done
for t in $tasks; do case " $first " in *" $t "*) ;; *) order="$order $t" ;; esac; done

total_pass=0
total_fail=0
# sums NAME's counts and prints its failures
tally() {
    if [ -f "$RUN_OUT/$1.counts" ]; then
        set -- "$1" $(cat "$RUN_OUT/$1.counts")
        cat "$RUN_OUT/$1.fail"
    else   # killed before it wrote its counts
        echo "FAIL $1: did not finish"; set -- "$1" 0 1
    fi
    total_pass=$((total_pass + $2)); total_fail=$((total_fail + $3))
}
echo "  ($JOBS at a time)"
printf '%s\n' $order | xargs -P "$JOBS" -n 1 sh tests/run.sh --one
for t in $tasks; do tally "$t"; done

if [ -n "$ONLY" ]; then
    rm -rf "$RUN_OUT" "$nvlog" "$nvseen"
    echo "$total_pass passed, $total_fail failed"
    [ "$total_fail" -eq 0 ]
    exit
fi
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
        log="$RUN_OUT/sim.log"
        BUILD="$BUILD" sh tests/sim/run.sh > "$log" 2>&1
        grep -v ' passed, .* failed$' "$log" | grep -v '^  sim .*: [0-9]* passed, 0 failed' | head -60
        grep '^  sim ' "$log"
        set -- $(tail -n 1 "$log" | awk '{print $1 + 0, $3 + 0}')
        echo "  test-sim: $1 passed, $2 failed ($(( $(date +%s) - start ))s)"
        total_pass=$((total_pass + $1)); total_fail=$((total_fail + $2))
        sh tests/run.sh --one sim_mutations
        tally sim_mutations
    else
        echo "  test-sim: skipped (the simulator is not built: make sim)"
    fi ;;
esac
rm -rf "$RUN_OUT" "$nvlog" "$nvseen"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
