#!/bin/sh
# gpu/pack.sh — on the build machine: the portable build (docs/cuda.md) and gpucarry/, what
# tests/gpu/lease.sh needs on a GPU machine that has no -dev packages and no network: the stitch
# binary, the test and bench programs (debug info stripped, to fit a lease's transfer limit), the
# Fashion-MNIST files and the fortunes corpus. gpucarry/ is ignored by git; name it in `carry`.
cd "$(dirname "$0")/../.." || exit 1
B=build-gpu
make PORTABLE=1 BUILD=$B -j"$(nproc)" > /dev/null || exit 1
make PORTABLE=1 BUILD=$B -j"$(nproc)" $(ls tests/test_*.c | sed "s|tests/\(.*\)\.c|$B/tests/\1|") > /dev/null || exit 1
# the bench programs without -march=native: the GPU machine's processor may differ
make -C bench progs BUILD=../$B CFLAGS="-std=c11 -O2 -g -pthread" > /dev/null || exit 1
rm -rf gpucarry; mkdir -p gpucarry/build/tests gpucarry/build/bench
cp $B/stitch gpucarry/build/
for f in $B/tests/test_*; do case $f in *.d) ;; *) cp "$f" gpucarry/build/tests/ ;; esac; done
cp $B/bench/bench_cuda gpucarry/build/bench/
strip --strip-debug gpucarry/build/tests/* gpucarry/build/bench/* gpucarry/build/stitch
# OLD=dir: a second portable build (e.g. main before a change, built in its own worktree) as
# gpucarry/build-old, for lease.sh's OLD_BUILD before/after timings in one call
if [ -n "$OLD" ]; then
    mkdir -p gpucarry/build-old/bench
    cp "$OLD/stitch" gpucarry/build-old/ && cp "$OLD/bench/bench_cuda" gpucarry/build-old/bench/ || exit 1
    strip --strip-debug gpucarry/build-old/stitch gpucarry/build-old/bench/bench_cuda
fi
[ -d /usr/share/datasets/fashion-mnist ] && cp -r /usr/share/datasets/fashion-mnist gpucarry/
[ -d /usr/share/games/fortunes ] && cp -rL /usr/share/games/fortunes gpucarry/
du -sh gpucarry
