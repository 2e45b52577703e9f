#!/bin/sh
# run_module_test.sh — build/stitch.so loads into a stock lua5.4 with require "stitch".
BUILD=${BUILD:-build}
cd "$(dirname "$0")/../.." || exit 1
if ! command -v lua5.4 >/dev/null; then echo "FAIL module_require: lua5.4 not installed"; exit 1; fi
if [ ! -f "$BUILD/stitch.so" ]; then echo "FAIL module_require: $BUILD/stitch.so not built"; exit 1; fi
# A sanitizer build of the module needs the sanitizer runtimes loaded before the (uninstrumented)
# interpreter starts.
pre=""
case "$BUILD" in *san*) pre="$(cc -print-file-name=libasan.so) $(cc -print-file-name=libubsan.so)" ;; esac
out=$(LD_PRELOAD="$pre" ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" LUA_CPATH="$BUILD/?.so" lua5.4 -e '
local st = require "stitch"
local y = st.ones(2) + 1
print(y)
assert(y:sum():item() == 4, "sum")
local m = st.tensor{{1, 2}, {3, 4}}
assert(m[2][1] == 3, "indexing")
assert(not pcall(function() return st.ones(2, 3) + st.ones(4) end), "error")
collectgarbage()
print("ok")
' 2>&1)
rc=$?
case "$out" in
*"tensor([2.0000, 2.0000], dtype=f32"*ok*)
    if [ $rc -eq 0 ]; then echo "PASS module_require"; exit 0; fi ;;
esac
echo "FAIL module_require: rc=$rc output:"
echo "$out" | sed 's/^/    /'
exit 1
