#!/bin/sh
# gpu/lease.sh — everything issue 16 asks of a GPU, in one call that fits a short lease (docs/cuda.md,
# "On a GPU machine"). Build here first (tests/gpu/pack.sh makes gpucarry/: portable binaries,
# stripped, plus the Fashion-MNIST files and the fortunes corpus), then on the GPU machine:
#   sh tests/gpu/lease.sh [A_SECONDS B_SECONDS C_SECONDS [D_SECONDS]]   (a phase given 0 seconds is skipped;
#   NCU=seconds adds an Nsight Compute profile of bench/ncu_cases.lua after phase B)
# Environment: GRAPHS (fuzzer graphs per run, 120), BENCH_ARGS (run_gpu.sh's, "--quick"), OLD_BUILD
# (a second build, e.g. main before a change: its stitch side of bench_fusion runs first in phase
# B, so before and after are timed on the same GPU in the same call).
# Phase A (in parallel, the GPU shared): the C suites and the Lua tests on cuda (as test-gpu), the
# fuzzer (--device cuda), compute-sanitizer memcheck/racecheck/synccheck. Phase B (the GPU alone):
# bench/run_gpu.sh --quick. Phase C (the GPU alone): the examples, timed. Phase D (in parallel, off
# by default): deeper checks, the Lua op fuzzer over FUZZ_OPS_N programs (200) in four jobs from
# seed 13, the graph fuzzer from seed 99, compute-sanitizer over the nn tests and Lua fuzz programs.
# Each job has a time limit;
# logs go to $OUT/logs.tgz (or ./gpu-out); a summary table is printed last.
cd "$(dirname "$0")/../.." || exit 1
A=${1:-180}; B=${2:-170}; C=${3:-90}; D=${4:-0}
OUT=${OUT:-$(pwd)/gpu-out}; mkdir -p "$OUT"
export BUILD=${BUILD:-$(pwd)/gpucarry/build}
export ST_CACHE_DIR=$(mktemp -d)
export ST_JIT_ASYNC=0   # tests and benches time and check compiled kernels (tests/run.sh)
export FASHION_MNIST_DIR=$(pwd)/gpucarry/fashion-mnist
export PATH=$PATH:/usr/local/cuda/bin PYTHONUNBUFFERED=1
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
L=$(mktemp -d)   # every log; they come back as $OUT/logs.tgz
summary=$OUT/summary.txt; : > "$summary"
{
    echo "== machine =="; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    echo "cores $(nproc); cc: $(cc --version 2>&1 | head -1); python: $(python3 -c 'import torch, sys; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1)"
    echo "compute-sanitizer: ${CS:-none}"
    ST_DEVICE=cuda "$BUILD/stitch" -e 'print("stitch device: " .. st.device())' 2>&1
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

job() { # name seconds command...: runs in the background, one line in the summary
    name=$1; secs=$2; shift 2
    (
        s=$(date +%s)
        timeout -k 5 "$secs" "$@" > "$L/$name.log" 2>&1; rc=$?
        p=$(grep -c '^PASS' "$L/$name.log"); f=$(grep -c '^FAIL' "$L/$name.log")
        printf '%-28s rc=%-3s pass=%-4s fail=%-3s %ss\n' "$name" "$rc" "$p" "$f" "$(( $(date +%s) - s ))" >> "$summary"
    ) &
}

if [ "$A" -gt 0 ]; then
echo "== phase A: suites on cuda, fuzzer, sanitizers (limit ${A}s) =="
T=$((A - 10))
job c_small $T sh -c 'for t in test_cuda_driver test_cuda_contact test_nvrtc test_mma test_epilogue test_prologue \
    test_horizontal test_cuda_counts test_fusion_counts test_devalloc test_device test_interp test_render_cuda; do
    echo "== $t"; ST_DEVICE=cuda "$BUILD/tests/$t" || echo "FAIL $t: exit $?"; done'
job test_ops $T env ST_DEVICE=cuda "$BUILD/tests/test_ops"
job test_opmath $T env ST_DEVICE=cuda "$BUILD/tests/test_opmath"
job test_autograd $T env ST_DEVICE=cuda "$BUILD/tests/test_autograd"
G=${GRAPHS:-120}
job fuzz_a $T "$BUILD/tests/test_fuzz" --device cuda --graphs "$G"
job fuzz_b $T "$BUILD/tests/test_fuzz" --device cuda --graphs "$G" --seed 17
i=0
for chain in "amp arity autograd autograd_function char_transformer data deferred_errors jit_async" "device einsum epilogue errors fuzz_ops graph horizontal index io oom tensor_index" \
             "nn nn_attention nn_containers nn_more nn_norm nn_rnn nn_options nn_torch_load optim" \
             "optim_more plan_cache print reduce repl runtime tensor tensor_ops tensor_sort"; do
    i=$((i + 1))
    job lua$i $T sh -c "for n in $chain; do echo \"== \$n\"; ST_DEVICE=cuda \"$BUILD/stitch\" tests/lua/test_\$n.lua || echo \"FAIL test_\$n.lua: exit \$?\"; done"
done
if [ -n "$CS" ]; then
    job memcheck_ops $T "$CS" --tool memcheck --error-exitcode 9 env ST_DEVICE=cuda "$BUILD/tests/test_ops"
    job memcheck_fuzz $T "$CS" --tool memcheck --error-exitcode 9 "$BUILD/tests/test_fuzz" --device cuda --graphs 60 --seed 3
    job racecheck_ops $T "$CS" --tool racecheck --error-exitcode 9 env ST_DEVICE=cuda "$BUILD/tests/test_ops"
    job synccheck_ops $T "$CS" --tool synccheck --error-exitcode 9 env ST_DEVICE=cuda "$BUILD/tests/test_ops"
    job racecheck_reduce $T "$CS" --tool racecheck --error-exitcode 9 env ST_DEVICE=cuda "$BUILD/stitch" tests/lua/test_reduce.lua
fi
wait
fi

if [ "$D" -gt 0 ]; then
echo "== phase D: Lua op fuzzer, graph fuzzer, sanitizers over the nn tests (limit ${D}s) =="
T=$((D - 10)); n=$(( ${FUZZ_OPS_N:-200} / 4 ))
for k in 0 1 2 3; do
    job fuzz_ops$k $T env ST_DEVICE=cuda ST_FUZZ_OPS_FIRST=$((13 + k * n)) ST_FUZZ_OPS_N=$n "$BUILD/stitch" tests/lua/test_fuzz_ops.lua
done
job fuzz_c $T "$BUILD/tests/test_fuzz" --device cuda --graphs "${GRAPHS:-120}" --seed 99
if [ -n "$CS" ]; then
    for tool in memcheck racecheck; do
        job ${tool}_nn $T sh -c "for n in nn_attention nn_norm nn_rnn; do echo \"== \$n\"; ST_DEVICE=cuda \"$CS\" --tool $tool --error-exitcode 9 \"$BUILD/stitch\" tests/lua/test_\$n.lua || echo \"FAIL test_\$n.lua: exit \$?\"; done"
    done
    job memcheck_fuzz_ops $T env ST_DEVICE=cuda ST_FUZZ_OPS_FIRST=400 ST_FUZZ_OPS_N=16 "$CS" --tool memcheck --error-exitcode 9 "$BUILD/stitch" tests/lua/test_fuzz_ops.lua
fi
wait
fi

[ "$B" -gt 0 ] && {
if [ -n "$OLD_BUILD" ]; then
    echo "== phase B: OLD_BUILD=$OLD_BUILD (before): bench_cuda, the stitch side of bench_fusion =="
    [ -x "$OLD_BUILD/bench/bench_cuda" ] &&
        timeout -k 5 $((B / 4)) "$OLD_BUILD/bench/bench_cuda" "$L/old_cuda.txt" --quick > "$L/old_cuda.log" 2>&1
    ST_DEVICE=cuda timeout -k 5 $((B / 4)) "$OLD_BUILD/stitch" bench/bench_fusion.lua "$L/old_fusion.txt" \
        --cases=softmax,layernorm_fwd,layernorm,cross_entropy,adamw,linear_gelu,block,mlp --quick --device=cuda \
        > "$L/old_bench.log" 2>&1
    { grep "GB/s\|us per\|per kernel" "$L/old_cuda.log"; grep "stitch " "$L/old_bench.log"; } |
        sed 's/^/before: /' > "$OUT/bench_before.txt"
fi
echo "== phase B: bench/run_gpu.sh --quick (limit ${B}s) =="
timeout -k 5 "$B" sh bench/run_gpu.sh ${BENCH_ARGS:---quick} > "$OUT/bench.txt" 2>&1
echo "bench rc=$?" >> "$OUT/bench.txt"
}

# NCU=seconds: Nsight Compute's speed-of-light and memory sections for bench/ncu_cases.lua's kernels
if [ "${NCU:-0}" -gt 0 ] && command -v ncu > /dev/null 2>&1; then
    echo "== ncu (limit ${NCU}s) =="
    ST_DEVICE=cuda timeout -k 5 "$NCU" ncu --kernel-name regex:st_k --launch-skip 0 --launch-count 12 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        "$BUILD/stitch" bench/ncu_cases.lua > "$OUT/ncu.txt" 2>&1
    echo "ncu rc=$?" >> "$OUT/ncu.txt"
fi

[ "$C" -gt 0 ] && {
echo "== phase C: examples (limit ${C}s) =="
c=$((C / 3))
timeout -k 5 "$c" "$BUILD/stitch" examples/fashion_mnist_mlp.lua --epochs 2 > "$L/ex_mlp.log" 2>&1; echo "mlp rc=$?" >> "$L/ex_mlp.log"
timeout -k 5 "$c" "$BUILD/stitch" examples/fashion_mnist_cnn.lua --epochs 1 > "$L/ex_cnn.log" 2>&1; echo "cnn rc=$?" >> "$L/ex_cnn.log"
timeout -k 5 "$c" "$BUILD/stitch" examples/char_transformer.lua --steps 300 --corpus gpucarry/fortunes > "$L/ex_char.log" 2>&1; echo "char rc=$?" >> "$L/ex_char.log"
}

cd "$L" && tar czf "$OUT/logs.tgz" . && cd - > /dev/null
echo "== failures (first 60) =="
grep -h '^FAIL\|ERROR SUMMARY\|RACECHECK SUMMARY\|Invalid\|error:' "$L"/*.log | sort | uniq -c | sort -rn | head -60
[ "$C" -gt 0 ] && { echo "== examples =="; tail -n 4 "$L"/ex_*.log; }
[ -f "$OUT/bench_before.txt" ] && { echo "== bench before (OLD_BUILD) =="; cat "$OUT/bench_before.txt"; }
[ "$B" -gt 0 ] && { echo "== bench (last 60 lines) =="; tail -n 60 "$OUT/bench.txt"; }
echo "== summary =="; cat "$summary"
