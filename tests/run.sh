#!/bin/sh
# run.sh — run every test program and print the totals; the last line is "N passed, N failed".
# Each program prints `PASS name` / `FAIL name: why` lines; a program that crashes or exits non-zero
# without printing a FAIL line counts as one failure of its own.
BUILD=${BUILD:-build}
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
for t in "$BUILD"/tests/test_*; do
    [ -x "$t" ] || continue
    run "$(basename "$t")" "$t"
done
for t in tests/lua/test_*.lua; do
    [ -f "$t" ] || continue
    run "$(basename "$t")" "$BUILD/stitch" "$t"
done
for t in tests/lua/run_*.sh tests/run_*.sh; do
    [ -f "$t" ] || continue
    run "$(basename "$t")" env BUILD="$BUILD" sh "$t"
done
rm -f "$log"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
