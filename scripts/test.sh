#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test twice: in build/ as users build it, and
# in build-asan/ under AddressSanitizer and UndefinedBehaviorSanitizer; then the loader's tests
# once more under ThreadSanitizer (build-tsan/); then the libFuzzer targets (build-fuzz/) replay
# their regression inputs and fuzz for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-deps.sh
jobs=$(nproc)
start=$SECONDS

echo "== build (RelWithDebInfo) (at $((SECONDS - start)) s) =="
# -g1 instead of -g: line tables are enough for a failing test's backtrace, and without the
# variable info every file compiles about 25% faster (the two builds are most of this script's time).
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" >/dev/null
cmake --build build -j"$jobs"
# Real servers on 127.0.0.1 for the remote tests (nginx, Ceph's RADOS Gateway checking S3
# signatures, Azurite),
# serving a small generated dataset; stopped by pid on exit, also when a test fails.
echo "== test servers (at $((SECONDS - start)) s) =="
servers=$(mktemp -d)
data="$servers/data"
trap 'scripts/test-servers.sh stop "$servers/state"; rm -rf "$servers"' EXIT
build/examples/make_synthetic_shards "$data" --shards 4 --samples 30 --size 64 --seed 3
scripts/test-servers.sh start "$data" "$servers/state"
# shellcheck disable=SC1091
source "$servers/state/env"

echo "== tests (at $((SECONDS - start)) s) =="
(cd build && ctest --output-on-failure -j"$jobs")

echo "== build (ASan + UBSan) (at $((SECONDS - start)) s) =="
# -g1: line tables for the sanitizers' stack traces, without variable info (compiles ~20% faster).
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="-O1" \
  -DCMAKE_CXX_FLAGS_DEBUG="-g1" \
  -DWDS_SANITIZE=ON -DWDS_BUILD_BENCH=OFF -DWDS_BUILD_EXAMPLES=OFF -DWDS_BUILD_PYTHON=OFF >/dev/null
cmake --build build-asan -j"$jobs"
echo "== tests under ASan + UBSan (at $((SECONDS - start)) s) =="
(cd build-asan &&
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j"$jobs")

# The loader's lock-free hand-off, the batch buffer pool and Bytes' recycling under
# ThreadSanitizer: one small target built from the sources it needs (about a minute), not a
# third build of everything.
echo "== loader, batch pool and Bytes under ThreadSanitizer (at $((SECONDS - start)) s) =="
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWDS_SANITIZE_THREAD=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DWDS_BUILD_BENCH=OFF -DWDS_BUILD_EXAMPLES=OFF -DWDS_BUILD_TOOLS=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target loader_tsan_test
TSAN_OPTIONS=halt_on_error=1 build-tsan/tests/loader_tsan_test

# Every parser of untrusted bytes under libFuzzer + ASan + UBSan (fuzz/README.md): the library
# built once more with clang (about two minutes), each target's regression inputs replayed, then
# 10 s of fuzzing per target, two at a time (about a minute).
echo "== fuzz targets (libFuzzer, ASan + UBSan) (at $((SECONDS - start)) s) =="
fuzz/run.sh 10

echo "scripts/test.sh: all tests passed in every build ($((SECONDS - start)) s)"
