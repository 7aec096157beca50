#!/usr/bin/env bash
# make fuzz-long: runs every libFuzzer target in BUILD for RUNS executions (at most SECONDS each),
# one after the other, on a corpus kept in BUILD/corpus/<target> (seeds from fuzz/seeds/<target>).
# Prints one line per target: executions, seconds, crashes; exits 1 when any target crashed.
set -uo pipefail
build="${1:-build/fuzz}"
runs="${2:-10000000}"
seconds="${3:-3600}"
src="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$build/findings"
status=0
summary=""
for bin in "$build"/fuzz/day0_fuzz_*; do
  [[ -x "$bin" ]] || continue
  name="$(basename "$bin")"
  name="${name#day0_fuzz_}"
  corpus="$build/fuzz/corpus/$name"
  mkdir -p "$corpus" "$build/findings/$name"
  log="$build/findings/$name/log.txt"
  start=$(date +%s)
  "$bin" -runs="$runs" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=20 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$name/" "$corpus" "$src/fuzz/seeds/$name" >"$log" 2>&1
  rc=$?
  took=$(($(date +%s) - start))
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  crashes=$(find "$build/findings/$name" -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' | wc -l)
  [[ $rc -ne 0 || $crashes -ne 0 ]] && status=1
  line="fuzz-long: $name: ${execs:-?} executions in ${took} s, exit $rc, $crashes crash/timeout/oom inputs"
  echo "$line"
  summary+="$line"$'\n'
done
printf '%s' "$summary" >"$build/findings/summary.txt"
exit $status
