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
    # Of OpenCV's modules (opencv4.pc lists about 50), only those libwds links may be named.
    for flags in "--libs" "--static --libs"; do
      # shellcheck disable=SC2086
      extra=$(pkg-config $flags wds | tr ' ' '\n' | grep '^-lopencv_' |
        grep -v -x -e -lopencv_core -e -lopencv_imgproc -e -lopencv_imgcodecs || true)
      if [ -n "$extra" ]; then
        echo "pkg-config $flags wds names OpenCV modules libwds does not use:" "$extra" >&2
        exit 1
      fi
    done
    # shellcheck disable=SC2046
    g++ "$here/main.cpp" -o "$work/b/consumer" $(pkg-config --cflags --libs wds)
    # The static way, when the system has what it asks for: with --static, libarchive and
    # libcurl add their own dependencies, whose development files are often not installed.
    missing=()
    for l in $(pkg-config --static --libs-only-l wds); do
      name=${l#-l} found=no
      for d in $(pkg-config --static --libs-only-L wds | sed 's/-L//g'); do
        [ -e "$d/lib$name.so" ] || [ -e "$d/lib$name.a" ] && found=yes
      done
      [ "$(g++ -print-file-name="lib$name.so")" != "lib$name.so" ] && found=yes
      [ "$(g++ -print-file-name="lib$name.a")" != "lib$name.a" ] && found=yes
      [ $found = yes ] || missing+=("$name")
    done
    if [ ${#missing[@]} -eq 0 ]; then
      # shellcheck disable=SC2046
      g++ "$here/main.cpp" -o "$work/b/consumer-static" $(pkg-config --cflags --static --libs wds)
      "$work/b/consumer-static"
    else
      echo "pkg-config --static --libs wds: not linked, the system lacks ${missing[*]}"
    fi
    # The dataset generator the README starts from is installed with the examples.
    if [ -x "$build/examples/make_synthetic_shards" ] && [ -x "$work/prefix/bin/wds" ]; then
      "$work/prefix/bin/make_synthetic_shards" "$work/data" --shards 1 --samples 3 --size 16 >/dev/null
      [ "$("$work/prefix/bin/wds" ls "$work/data/" | wc -l)" -eq 3 ]
    fi
    ;;
  add_subdirectory)
    # Built as a shared library here, so this also covers -DBUILD_SHARED_LIBS=ON.
    cmake -S "$here/add_subdirectory" -B "$work/b" "${gen[@]}" -DWDS_SOURCE_DIR="$src" -DBUILD_SHARED_LIBS=ON >/dev/null
    cmake --build "$work/b" >/dev/null
    ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
"$work/b/consumer"
