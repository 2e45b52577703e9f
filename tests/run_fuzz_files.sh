#!/bin/sh
# run_fuzz_files.sh — make test's short run of the libFuzzer harnesses (tests/fuzz; `make fuzz-files`
# runs them long): builds them with clang (FUZZ=1, build/fuzz) and runs each for FUZZ_SECONDS (20).
# Skipped without clang, and in the sanitizer pass (the harnesses are built with the sanitizers).
cd "$(dirname "$0")/.." || exit 1
case "${BUILD:-build}" in */san) echo "  fuzz_files: skipped in the sanitizer pass"; exit 0 ;; esac
command -v clang > /dev/null 2>&1 || { echo "  fuzz_files: skipped (no clang: apt-get install clang)"; exit 0; }
log=$(mktemp)
make --no-print-directory FUZZ=1 -j2 fuzz-bins > "$log" 2>&1 ||
    { echo "FAIL fuzz_files: make FUZZ=1 fuzz-bins"; tail -n 30 "$log"; rm -f "$log"; exit 1; }
rm -f "$log"
STITCH=${BUILD:-build}/stitch sh tests/fuzz/run.sh "${FUZZ_SECONDS:-20}"
