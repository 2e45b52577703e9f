#!/bin/sh
# check_ops.sh [BUILD] — docs/ops.md is what trace/ops.def says (tools/gen_ops.c prints it; `make
# docs` rewrites it). The public header's lists are checked against the table when runtime/ops.c
# compiles.
BUILD=${1:-build}
cd "$(dirname "$0")/.." || exit 1
[ -x "$BUILD/tools/gen_ops" ] || { echo "FAIL check_ops: $BUILD/tools/gen_ops missing (build first)"; exit 1; }
if "$BUILD/tools/gen_ops" | diff -u docs/ops.md - > /dev/null; then
    echo "PASS check_ops: docs/ops.md matches trace/ops.def"
else
    echo "FAIL check_ops: docs/ops.md is out of date with trace/ops.def; run make docs"
    "$BUILD/tools/gen_ops" | diff -u docs/ops.md - | head -20
    exit 1
fi
