#!/bin/sh
# nvrtc_check.sh — `make test-nvrtc`: render every kernel that the op tests, the fuzzer (its first
# NVRTC_GRAPHS graphs, default 300), autograd and the Lua tests lower as CUDA C and compile it with
# NVRTC for sm_80 and sm_90a (no GPU needed). Prints the
# number of distinct kernels compiled per program and in all; exits non-zero if any failed.
BUILD=${BUILD:-build}
cd "$(dirname "$0")/.." || exit 1
export ST_DEVICE=cpu ST_NVRTC_CHECK=1 ST_CACHE_DIR=${ST_CACHE_DIR:-$(mktemp -d)}
export ST_NVRTC_CHECK_LOG=$(mktemp)
status=0
for t in "$BUILD"/tests/test_ops "$BUILD"/tests/test_opmath "$BUILD"/tests/test_fuzz "$BUILD"/tests/test_fuser "$BUILD"/tests/test_autograd \
         tests/lua/test_*.lua; do
    case "$t" in
    *.lua) cmd="$BUILD/stitch $t" ;;
    */test_fuzz) cmd="$t --graphs ${NVRTC_GRAPHS:-300}" ;;   # ~5 kernels per graph, ~40 ms each
    *) cmd="$t" ;;
    esac
    before=$(wc -l < "$ST_NVRTC_CHECK_LOG")
    $cmd > /dev/null 2>&1 || { echo "FAIL $(basename "$t") (rerun: ST_NVRTC_CHECK=1 $cmd)"; status=1; }
    tail -n +$((before + 1)) "$ST_NVRTC_CHECK_LOG" | awk -v n="$(basename "$t")" '{c += $1; f += $2} END {printf "  %-22s %5d kernels compiled, %d failed\n", n, c, f}'
done
awk '{c += $1; f += $2} END {printf "nvrtc: %d CUDA kernels compiled for sm_80 and sm_90a, %d failed\n", c, f; exit f > 0}' "$ST_NVRTC_CHECK_LOG" || status=1
rm -f "$ST_NVRTC_CHECK_LOG"
exit $status
