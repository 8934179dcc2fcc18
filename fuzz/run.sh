#!/usr/bin/env bash
# Builds the libFuzzer targets in build-fuzz/ (clang, ASan + UBSan) and runs each one: first on
# its regression inputs (fuzz/regressions/<name>/ and the large ones fuzz/make_corpus.py
# generates), then fuzzing from its seed corpus (fuzz/corpus/<name>/) for a bounded time. Any
# crash, sanitizer report, leak or failed invariant fails the run; the input that did it is left
# in build-fuzz/artifacts/ and the target's log is printed.
#
#   fuzz/run.sh [seconds per target]     # default 10; scripts/test.sh runs it so
#   WDS_FUZZ_TARGETS="fuzz_brace fuzz_npy" fuzz/run.sh 60
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-10}
build=build-fuzz
jobs=$(nproc)

CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -gline-tables-only" -DWDS_BUILD_FUZZERS=ON \
  -DWDS_BUILD_TESTS=OFF -DWDS_BUILD_BENCH=OFF -DWDS_BUILD_TOOLS=OFF -DWDS_BUILD_EXAMPLES=OFF \
  -DWDS_INSTALL=OFF -DWDS_WITH_OPENCV=OFF >/dev/null
targets=${WDS_FUZZ_TARGETS:-$(cd fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')}
# shellcheck disable=SC2086
cmake --build "$build" -j"$jobs" --target $targets

large="$build/regressions-large"
python3 fuzz/make_corpus.py --large "$large"
mkdir -p "$build/artifacts" "$build/logs"

run_target() {
  local target=$1 seconds=$2 build=$3 large=$4
  local name=${target#fuzz_} bin="$build/fuzz/$target" log="$build/logs/$target.log"
  local work="$build/corpus/$name"
  mkdir -p "$work"
  local regressions=()
  for d in "fuzz/regressions/$name" "$large/$name"; do
    [ -d "$d" ] && regressions+=("$d"/*)
  done
  # Inputs given as files run once each, whatever their size; then fuzzing from the seeds (and
  # what earlier runs found, kept in $work), on inputs of at most 4 KiB.
  local opts=(-rss_limit_mb=2560 -timeout=10 -artifact_prefix="$build/artifacts/$target-")
  if { [ ${#regressions[@]} -eq 0 ] || "$bin" "${opts[@]}" "${regressions[@]}"; } >"$log" 2>&1 &&
    "$bin" "${opts[@]}" -max_len=4096 -max_total_time="$seconds" -print_final_stats=1 \
      "$work" "fuzz/corpus/$name" >>"$log" 2>&1; then
    echo "$target: ok ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" |
      grep -o '[0-9]*$' || echo ?) runs)"
  else
    echo "$target: FAILED (log: $log)"
    tail -n 60 "$log"
    return 1
  fi
}
export -f run_target

export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0
export UBSAN_OPTIONS=print_stacktrace=1
# Two at a time: each target is one process on one core.
# shellcheck disable=SC2086
printf '%s\n' $targets |
  xargs -P "$jobs" -I{} bash -c 'run_target "$@"' _ {} "$seconds" "$build" "$large"
