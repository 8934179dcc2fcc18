#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test twice: in build/ as users build it, and
# in build-asan/ under AddressSanitizer and UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-deps.sh
jobs=$(nproc)
start=$SECONDS

echo "== build (RelWithDebInfo) =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$jobs"
echo "== tests =="
(cd build && ctest --output-on-failure -j"$jobs")

echo "== build (ASan + UBSan) =="
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="-O1" \
  -DWDS_SANITIZE=ON -DWDS_BUILD_BENCH=OFF -DWDS_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build-asan -j"$jobs"
echo "== tests under ASan + UBSan =="
(cd build-asan &&
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j"$jobs")

echo "scripts/test.sh: all tests passed in both builds ($((SECONDS - start)) s)"
