#!/bin/sh
# fuzz/run.sh SECONDS — runs each libFuzzer harness (build/fuzz/fuzz/fuzz_*, `make FUZZ=1 fuzz-bins`)
# for SECONDS on its corpus (build/fuzz/corpus/NAME, seeded by seeds.lua through build/stitch, kept
# between runs) and prints `PASS fuzz_NAME: E executions ...` or `FAIL ...` with the reproducer's
# path (build/fuzz/crash-NAME-*). `make fuzz-files` runs it for 600 s each; make test for a few
# seconds each (tests/run_fuzz_files.sh).
S=${1:-600}
cd "$(dirname "$0")/../.." || exit 1
B=build/fuzz
STITCH=${STITCH:-build/stitch}
C=$B/corpus
mkdir -p "$C/safetensors" "$C/idx" "$C/index"
ST_DEVICE=cpu "$STITCH" tests/fuzz/seeds.lua "$C" || { echo "FAIL fuzz seeds: $STITCH tests/fuzz/seeds.lua"; exit 1; }
for f in "$C"/idx/t*.idx; do gzip -c "$f" > "$f.gz"; done
status=0
for h in safetensors idx index; do
    bin=$B/fuzz/fuzz_$h
    [ -x "$bin" ] || { echo "FAIL fuzz_$h: no $bin (make FUZZ=1 fuzz-bins)"; status=1; continue; }
    log=$(mktemp)
    # the inputs that crashed a harness once (tests/fuzz/regress/NAME-*), each run once first
    for r in tests/fuzz/regress/$h-*; do
        [ -f "$r" ] || continue
        ST_DEVICE=cpu ST_EAGER=1 "$bin" "$r" > "$log" 2>&1 ||
            { echo "FAIL fuzz_$h: regression input $r"; grep -m 10 'ERROR\|SUMMARY\|runtime error' "$log"; status=1; }
    done
    ST_DEVICE=cpu ST_EAGER=1 ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
        "$bin" -max_total_time="$S" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$B/crash-$h-" "$C/$h" > "$log" 2>&1
    rc=$?
    execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
    if [ $rc -eq 0 ]; then
        echo "PASS fuzz_$h: ${execs:-?} executions in ${S}s, $(ls "$C/$h" | wc -l) inputs in the corpus, 0 crashes"
    else
        echo "FAIL fuzz_$h: status $rc after ${execs:-?} executions (reproducer: $(ls -t "$B"/crash-$h-* 2>/dev/null | head -1))"
        grep -m 20 'ERROR\|SUMMARY\|#[0-9] ' "$log"
        status=1
    fi
    rm -f "$log"
done
exit $status
