#!/bin/sh
# Runs each fuzz target for FUZZ_SECONDS (default 30), FUZZ_JOBS (default 2)
# targets at a time (libFuzzer runs on one core: two at once on a 2-core
# machine give each target the same time in half the wall time), on the
# seed corpus in fuzz/corpus/NAME plus the reproducers of past findings in
# fuzz/regressions/NAME (read first: one that still fails ends that target
# at once). New inputs go to build/fuzz/corpus/NAME, findings to
# build/fuzz/findings/NAME/. Prints one line per target, in the order
# given, and exits non-zero if any target found anything (crash, leak,
# undefined behaviour, timeout, OOM).
#   usage: fuzz/run_fuzzers.sh BUILD_DIR TARGET...
set -u
build=$1
shift
seconds=${FUZZ_SECONDS:-30}
jobs=${FUZZ_JOBS:-2}
case $jobs in
    '' | *[!0-9]* | 0) echo "fuzz/run_fuzzers.sh: FUZZ_JOBS='$jobs': give the number of targets to run at once (1 or more)" >&2; exit 2 ;;
esac

# One target; its exit status goes to logs/NAME.status.
fuzz_one() {
    name=$1
    findings="$build/findings/$name"
    regressions=""
    if [ -d "fuzz/regressions/$name" ]; then regressions="fuzz/regressions/$name"; fi
    "$build/fuzz_$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$findings/" "$build/corpus/$name" "fuzz/corpus/$name" $regressions \
        >"$build/logs/$name.log" 2>&1
    echo $? >"$build/logs/$name.status"
}

running=0
for name in "$@"; do
    mkdir -p "$build/corpus/$name" "$build/findings/$name" "$build/logs"
    rm -f "$build/findings/$name"/* "$build/logs/$name.status"
    echo "fuzz: $name for ${seconds}s (log: $build/logs/$name.log)"
    fuzz_one "$name" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait; running=0; fi
done
wait

total_failed=0
summary=""
for name in "$@"; do
    log="$build/logs/$name.log"
    findings="$build/findings/$name"
    status=$(cat "$build/logs/$name.status" 2>/dev/null || echo "none")
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    found=$(ls "$findings" | wc -l)
    if [ "$status" != 0 ] && [ "$found" -eq 0 ]; then found=1; fi # died without writing an input
    line=$(printf '%-16s %10s executions  %s finding(s)' "$name" "${execs:-?}" "$found")
    if [ "$found" -gt 0 ]; then
        total_failed=$((total_failed + 1))
        line="$line: $(ls "$findings" | tr '\n' ' ')"
        grep -m 1 -E 'ERROR: |runtime error:|SUMMARY: ' "$log" | sed 's/^/    /'
    fi
    summary="$summary$line
"
done
printf '\nfuzz summary (%ss per target, %s at a time):\n%s' "$seconds" "$jobs" "$summary"
if [ "$total_failed" -gt 0 ]; then
    echo "fuzz: $total_failed target(s) with findings; reproduce with build/fuzz/fuzz_NAME FILE"
    exit 1
fi
echo "fuzz: no findings"
