#!/bin/sh
# Runs each fuzz target for FUZZ_SECONDS (default 30), one after another, on
# the seed corpus in fuzz/corpus/NAME plus the reproducers of past findings in
# fuzz/regressions/NAME (read first: one that still fails ends the run at
# once). New inputs go to build/fuzz/corpus/NAME, findings to
# build/fuzz/findings/NAME/. Prints one line per target and exits non-zero if
# any target found anything (crash, leak, undefined behaviour, timeout, OOM).
#   usage: fuzz/run_fuzzers.sh BUILD_DIR TARGET...
set -u
build=$1
shift
seconds=${FUZZ_SECONDS:-30}
total_failed=0
summary=""
for name in "$@"; do
    bin="$build/fuzz_$name"
    work="$build/corpus/$name"
    findings="$build/findings/$name"
    log="$build/logs/$name.log"
    mkdir -p "$work" "$findings" "$build/logs"
    rm -f "$findings"/*
    regressions=""
    if [ -d "fuzz/regressions/$name" ]; then regressions="fuzz/regressions/$name"; fi
    echo "fuzz: $name for ${seconds}s (log: $log)"
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$findings/" "$work" "fuzz/corpus/$name" $regressions >"$log" 2>&1
    status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    found=$(ls "$findings" | wc -l)
    if [ "$status" -ne 0 ] && [ "$found" -eq 0 ]; then found=1; fi # died without writing an input
    line=$(printf '%-16s %10s executions  %s finding(s)' "$name" "${execs:-?}" "$found")
    if [ "$found" -gt 0 ]; then
        total_failed=$((total_failed + 1))
        line="$line: $(ls "$findings" | tr '\n' ' ')"
        grep -m 1 -E 'ERROR: |runtime error:|SUMMARY: ' "$log" | sed 's/^/    /'
    fi
    summary="$summary$line
"
done
printf '\nfuzz summary (%ss per target):\n%s' "$seconds" "$summary"
if [ "$total_failed" -gt 0 ]; then
    echo "fuzz: $total_failed target(s) with findings; reproduce with build/fuzz/fuzz_NAME FILE"
    exit 1
fi
echo "fuzz: no findings"
