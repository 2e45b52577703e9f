#!/bin/sh
# mutate.sh — `make sim-mutations` (and `make test`): shows that the simulated GPU catches the bugs
# it is for. Each mutation below is applied to a scratch copy of the source tree (build/ left out),
# the library is rebuilt there and tests/sim/probe.lua runs on the simulated GPU; the mutation must
# make it fail (a simulator fault or a wrong value). Prints `PASS sim_mutation: <what>` when it is
# caught, `FAIL ...` when it is not, then "N caught, N missed".
# About 15 s in all on an idle 2-core machine (incremental rebuilds plus the changed kernels).
cd "$(dirname "$0")/../.." || exit 1
repo=$(pwd)
tree=$(mktemp -d)/tree
mkdir -p "$tree" && tar --exclude=./build --exclude=./.git -cf - . | tar -xf - -C "$tree" || exit 1
cache=$(mktemp -d)
caught=0; missed=0
# mutate NAME FILE OLD NEW: replaces the first OLD (a literal string) in FILE, runs the probe
mutate() {
    name=$1; file=$2
    python3 - "$tree/$file" "$3" "$4" <<'PY' || { echo "FAIL sim_mutation: $name: the mutation no longer applies"; missed=$((missed + 1)); return; }
import sys
p, old, new = sys.argv[1:4]
s = open(p).read()
if old not in s: sys.exit(1)
open(p, "w").write(s.replace(old, new, 1))
PY
    (cd "$tree" && make -s -j2 all sim > /dev/null 2>&1) || { echo "FAIL sim_mutation: $name: build failed"; missed=$((missed + 1)); cp "$repo/$file" "$tree/$file"; return; }
    out=$(cd "$tree" && ST_CUDA_SIM=1 ST_CACHE_DIR="$cache" ST_SIM_EXPECT_FAULTS=1 timeout 600 ./build/stitch tests/sim/probe.lua 2>&1)
    if echo "$out" | grep -q '^ok bmm_f32'; then
        echo "FAIL sim_mutation: $name: not caught"; missed=$((missed + 1))
    else
        why=$(echo "$out" | grep -m1 'stitch-sim: fault\|refused\|max difference' | cut -c1-160)
        echo "PASS sim_mutation: $name (caught: $why)"; caught=$((caught + 1))
    fi
    cp "$repo/$file" "$tree/$file"   # undone
}
# the control: unmutated, the probe must pass (else every "caught" below would mean nothing)
if ! (cd "$tree" && make -s -j2 all sim > /dev/null 2>&1 && ST_CUDA_SIM=1 ST_CACHE_DIR="$cache" ./build/stitch tests/sim/probe.lua 2>&1 | grep -q '^ok bmm_f32'); then
    echo "FAIL sim_mutation: the probe fails without a mutation"
    rm -rf "$cache" "$(dirname "$tree")"
    exit 1
fi
mutate "barrier removed from the row-reduction template" jit/render_cuda.c \
    '        each_update(b, c, i, e, depth + 2, smem_write);
        render_indent(b, depth + 2);
        sbuf_printf(b, "__syncthreads();\n");' \
    '        each_update(b, c, i, e, depth + 2, smem_write);'
mutate "off-by-one in the mma tile's row guard" jit/render_cuda_mma.c \
    '{"gm < M && gka < K"' '{"gm <= M && gka < K"'
mutate "shuffle mask without lane 31" base/opmath.h \
    '#define ST_FULL_MASK 0xffffffffu' '#define ST_FULL_MASK 0x7fffffffu'
mutate "two f16 mma A-fragment registers swapped" jit/render_cuda_mma.c \
    '"st_mma_f16_", 16, 2, 2, {{0, 0}, {8, 0}, {0, 8}, {8, 8}}' '"st_mma_f16_", 16, 2, 2, {{0, 0}, {0, 8}, {8, 0}, {8, 8}}'
mutate "int kernel parameters marshalled as 4 bytes" device/cuda.c \
    '    for (int i = 0; i < c->nints; i++) params[p++] = (void *)(uintptr_t)&c->ints[i];' \
    '    static int32_t i32[256];
    for (int i = 0; i < c->nints; i++) { i32[i] = (int32_t)c->ints[i]; params[p++] = &i32[i]; }'
rm -rf "$cache" "$(dirname "$tree")"
echo "$caught caught, $missed missed"
[ "$missed" -eq 0 ]
