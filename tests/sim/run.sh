#!/bin/sh
# sim/run.sh — `make test-sim`: the suites on the simulated GPU (tests/sim; docs/cuda.md "The
# simulated GPU"). ST_CUDA_SIM=1 loads the stand-in driver and NVRTC from $BUILD/sim, and with
# ST_DEVICE unset the simulated cuda:0 is the default device: every tensor is created there and
# every kernel is rendered as CUDA C, compiled (by the host C++ compiler) and run there, launched
# through the same driver layer, allocator and plan cache as on a GPU. The fuzzer fuses on the
# simulated GPU against the reference interpreter on the CPU.
#
# The C suites of the CUDA paths run too, with the simulated cuda:0 as their default device: the
# matmul epilogues and prologues, devices, horizontal kernels, the fusion counts (also as the CUDA
# backend launches them), the tensor-core kernels. Each suite runs three times: CUDA threads
# scheduled forward, in reverse and in a seeded random order (ST_SIM_SCHED; blocks too), on 4, 1
# and 3 simulated SMs (ST_SIM_SMS: the grid sizes). Kernels are compiled once (the kernel cache is
# shared by the runs); a suite's first run pays the compiles. But the C suites of the fuser keep a
# cache of their own and compile in every run: those whose point is not the threads' order run
# once, under the random schedule: the kernel counts and the plan cache (test_fusion_counts,
# test_cuda_counts, the costliest) and the suites that run no kernel (test_mma, test_horizontal:
# source and compile checks). So do the three whole-model Lua suites (test_soak,
# test_resnet_example, test_char_transformer): their time goes into running, not compiling (35-57 s
# a schedule each on a 2-core Zen 5), and their kernels' kinds run under all three schedules in the
# op, autograd and layer suites. JOBS suites run at a time (default: the online CPUs), the fuzzer
# (the longest) first.
# Last line: "N passed, N failed".
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.." || exit 1
export ST_CUDA_SIM=1
export ST_JIT_ASYNC=${ST_JIT_ASYNC:-0}   # as tests/run.sh: compiled kernels, never a stand-in
unset ST_DEVICE ST_CUDA_LIB ST_NVRTC_PATH
# no NVRTC check mode (test_epilogue and test_prologue turn it on when an NVRTC loads): here it would
# compile every kernel twice more with the stand-in, which is not NVRTC (make test's cpu pass runs
# the check with the real one)
export ST_NVRTC_CHECK=0
GRAPHS=${SIM_GRAPHS:-500}

# suite NAME COMMAND...: runs it under each schedule, one after the other; writes $out/NAME.res
# ($scheds: the schedules when set, else all three)
suite() {
    name=$1; shift
    start=$(date +%s)
    : > "$out/$name.res"
    for sched in ${scheds:-forward reverse random:7}; do
        log="$out/$name.$sched.log"
        t0=$(date +%s)
        # the SM count sets the grids (grid-stride loops): 4, then 1, then 3 (no recompile)
        case "$sched" in forward) export ST_SIM_SMS=4 ;; reverse) export ST_SIM_SMS=1 ;; *) export ST_SIM_SMS=3 ;; esac
        ST_SIM_SCHED=$sched "$@" > "$log" 2>&1
        rc=$?
        # every group has a GPU kernel (fuser/exec.c splits one the lowering cannot do): a test
        # stopped by "no GPU kernel" fails like any other
        p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log")
        grep '^FAIL ' "$log" | head -20 | sed "s/^FAIL /FAIL [$sched] /" >> "$out/$name.res"
        if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
            echo "FAIL [$sched] $name: exited with status $rc" >> "$out/$name.res"; tail -n 15 "$log" >> "$out/$name.res"; f=1
        fi
        echo "$p $f $sched $(( $(date +%s) - t0 ))" >> "$out/$name.counts"
    done
    echo "$(( $(date +%s) - start ))" > "$out/$name.time"
}

suites="test_sim_mma test_sim access test_ops test_autograd test_fuzz"
suites="$suites test_epilogue test_prologue test_device test_horizontal test_fusion_counts test_cuda_counts test_mma"
for t in tests/lua/test_*.lua; do suites="$suites lua:$t"; done

run_one() {
    case "$1" in   # once, under the random schedule (see the top)
    test_fusion_counts|test_cuda_counts|test_mma|test_horizontal) scheds=random:7 ;;
    lua:*/test_soak.lua|lua:*/test_resnet_example.lua|lua:*/test_char_transformer.lua) scheds=random:7 ;;
    *) scheds= ;;
    esac
    case "$1" in
    test_sim_mma) suite test_sim_mma "$BUILD"/sim/test_sim_mma ;;
    test_sim) suite test_sim "$BUILD"/sim/test_sim ;;
    access) suite access env BUILD="$BUILD" sh tests/sim/access.sh ;;   # coalescing of stitch's kernels
    test_fuzz) suite test_fuzz "$BUILD"/tests/test_fuzz --device cuda --graphs "$GRAPHS" ;;
    lua:*) t=${1#lua:}; suite "$(basename "$t")" "$BUILD"/stitch "$t" ;;
    *) suite "$1" "$BUILD/tests/$1" ;;
    esac
}

# --one NAME: one suite (xargs runs it), its files in $out
if [ "${1:-}" = --one ]; then run_one "$2"; exit 0; fi

export ST_CACHE_DIR=${ST_SIM_CACHE:-$(mktemp -d)}
out=$(mktemp -d)
export out
if ! "$BUILD"/stitch -e 'assert(st.device() == "cuda:0", st.device())' > "$out/probe" 2>&1; then
    echo "FAIL test-sim: the simulated GPU is not the default device:"; cat "$out/probe"
    echo "0 passed, 1 failed"; exit 1
fi
# longest first (2-core times of the three schedules: the fuzzer ~420 s, test_soak ~185 s, ...)
first="test_fuzz lua:tests/lua/test_soak.lua test_autograd lua:tests/lua/test_char_transformer.lua test_ops test_prologue"
printf '%s\n' $first $suites | awk '!seen[$0]++' | xargs -P "${JOBS:-$(nproc 2>/dev/null || echo 1)}" -n 1 env BUILD="$BUILD" sh tests/sim/run.sh --one

pass=0; fail=0
for s in $suites; do
    case "$s" in lua:*) n=$(basename "${s#lua:}") ;; *) n=$s ;; esac
    [ -f "$out/$n.time" ] || { echo "FAIL sim $n: did not finish"; fail=$((fail + 1)); continue; }
    cat "$out/$n.res"
    p=$(awk '{s += $1} END {print s + 0}' "$out/$n.counts"); f=$(awk '{s += $2} END {print s + 0}' "$out/$n.counts")
    k=$(wc -l < "$out/$n.counts")
    echo "  sim $n: $p passed, $f failed ($(cat "$out/$n.time")s, $k schedule$([ "$k" -gt 1 ] && echo s): $(awk '{printf "%s%s %ss", (NR > 1 ? ", " : ""), $3, $4}' "$out/$n.counts"))"
    grep -h '^fuzz: ' "$out/$n".*.log 2>/dev/null | head -3
    pass=$((pass + p)); fail=$((fail + f))
done
rm -rf "$out"
[ -n "$ST_SIM_CACHE" ] || rm -rf "$ST_CACHE_DIR"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
