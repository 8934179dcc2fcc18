#!/usr/bin/env bash
# `pip install .` as a user runs it from a clone: a fresh virtualenv that sees the system's
# packages (Debian's numpy), pip installing the source tree with the build backend it already has
# (--no-build-isolation --no-index: nothing from the network), then wdscpp imported from outside
# the tree reads a shard; and `pip wheel .` makes a wheel holding the extension.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR PYTHON
# The build reuses BUILD_DIR's build type and flags, so that ccache finds what BUILD_DIR compiled.
set -euo pipefail
src=$1 build=$2 python=$3

"$python" -c 'import venv, ensurepip' 2>/dev/null || { echo "skipped: no venv/ensurepip (python3-venv)"; exit 77; }
"$python" -c 'import setuptools, wheel' 2>/dev/null || { echo "skipped: no setuptools/wheel"; exit 77; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
type=$(cache CMAKE_BUILD_TYPE)
type_upper=$(echo "$type" | tr '[:lower:]' '[:upper:]')
args="-DCMAKE_BUILD_TYPE=$type"
flags=$(cache "CMAKE_CXX_FLAGS_$type_upper")
[ -n "$flags" ] && args+=" '-DCMAKE_CXX_FLAGS_$type_upper=$flags'"
export WDS_CMAKE_ARGS=$args CMAKE_BUILD_PARALLEL_LEVEL=1

"$python" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/pip" install --quiet --no-build-isolation --no-index "$src"

# A shard of two samples, written with Python's tarfile.
cd "$work"
"$work/venv/bin/python" - <<'PY'
import io, tarfile
with tarfile.open("shard.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
    for key, text, label in (("a", "first", b"3"), ("b", "second", b"5")):
        for ext, data in (("txt", text.encode()), ("cls", label)):
            info = tarfile.TarInfo(f"{key}.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
PY
"$work/venv/bin/python" - "$src" <<'PY'
import re, sys
import wdscpp
assert "site-packages" in wdscpp.__file__, f"wdscpp imported from {wdscpp.__file__}, not the venv"
version = re.search(r"project\(wds\s+VERSION\s+([0-9.]+)", open(sys.argv[1] + "/CMakeLists.txt").read())[1]
assert wdscpp.__version__ == version, (wdscpp.__version__, version)
from importlib.metadata import version as installed
assert installed("wdscpp") == version, installed("wdscpp")
samples = list(wdscpp.WebDataset("shard.tar").decode().to_tuple("txt", "cls"))
assert samples == [("first", 3), ("second", 5)], samples
print("pip install: wdscpp", wdscpp.__version__, "reads", len(samples), "samples")
PY

"$work/venv/bin/pip" wheel --quiet --no-build-isolation --no-index --no-deps -w "$work/wheels" "$src"
"$work/venv/bin/python" - "$work/wheels" "$src" <<'PY'
import pathlib, sys, zipfile
wheels = list(pathlib.Path(sys.argv[1]).glob("wdscpp-*.whl"))
assert len(wheels) == 1, wheels
names = zipfile.ZipFile(wheels[0]).namelist()
assert any(n.startswith("wdscpp/_wdscpp") and n.endswith(".so") for n in names), names
sources = sorted(f"wdscpp/{p.name}" for p in (pathlib.Path(sys.argv[2]) / "python/wdscpp").glob("*.py"))
assert set(sources) <= set(names), sorted(set(sources) - set(names))
print("pip wheel:", wheels[0].name)
PY
