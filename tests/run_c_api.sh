#!/bin/sh
# run_c_api.sh — the C example builds against libstitch.a and runs; libstitch.so exports only st_*.
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
san=""
case "$BUILD" in *san*) san="-fsanitize=address,undefined" ;; esac
if cc $san -Iinclude examples/c_example.c "$BUILD/libstitch.a" -lm -ldl -pthread -o "$tmp/c_example" 2>"$tmp/log"; then
    out=$("$tmp/c_example" 2>&1)
    if echo "$out" | grep -q "row sums of exp(2x): 465.41[0-9]* 18776[0-9]" && echo "$out" | grep -q "(2, 3) and (2)"; then
        echo "PASS c_example"
    else
        echo "FAIL c_example: unexpected output: $out"
    fi
else
    echo "FAIL c_example: does not build: $(head -c 600 "$tmp/log")"
fi
bad=$(nm -D --defined-only "$BUILD/libstitch.so" | awk '$2 ~ /^[TDBRW]$/ {print $3}' | grep -v '^st_' | grep -v '^_' | head -5)
if [ -z "$bad" ]; then echo "PASS exports_only_st_api"; else echo "FAIL exports_only_st_api: also exports $bad"; fi
