#!/usr/bin/env bash
# Builds and runs a tiny user project against wds, the three ways a user consumes it:
#   run.sh find_package   BUILD_DIR SOURCE_DIR  (cmake --install, then find_package(wds))
#   run.sh pkg-config     BUILD_DIR SOURCE_DIR  (cmake --install, then pkg-config wds)
#   run.sh add_subdirectory BUILD_DIR SOURCE_DIR
set -euo pipefail
mode=$1 build=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
here="$src/tests/consumer"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
case "$mode" in
  find_package)
    cmake --install "$build" --prefix "$work/prefix" >/dev/null
    cmake -S "$here/find_package" -B "$work/b" "${gen[@]}" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
    cmake --build "$work/b" >/dev/null
    ;;
  pkg-config)
    cmake --install "$build" --prefix "$work/prefix" >/dev/null
    export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig:$work/prefix/lib64/pkgconfig"
    mkdir -p "$work/b"
    # shellcheck disable=SC2046
    g++ "$here/main.cpp" -o "$work/b/consumer" $(pkg-config --cflags --libs wds)
    ;;
  add_subdirectory)
    # Built as a shared library here, so this also covers -DBUILD_SHARED_LIBS=ON.
    cmake -S "$here/add_subdirectory" -B "$work/b" "${gen[@]}" -DWDS_SOURCE_DIR="$src" -DBUILD_SHARED_LIBS=ON >/dev/null
    cmake --build "$work/b" >/dev/null
    ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
"$work/b/consumer"
