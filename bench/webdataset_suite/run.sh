#!/usr/bin/env bash
# webdataset's own test suite as the acceptance bar of wdscpp's webdataset API (issue 25):
# runs webdataset 1.0.2's tests/ against webdataset itself, then against wdscpp (a shim makes
# `import webdataset` load wdscpp), and compares which tests pass.
#
#   bench/webdataset_suite/run.sh WEBDATASET_CHECKOUT [WDSCPP_PYTHONPATH] [OUT_DIR]
#
# WEBDATASET_CHECKOUT: a webdataset source tree (src/webdataset, tests/, testdata/); its
# testdata/imagenet-000000.tgz, absent from the public snapshot, is made by make_standin.py
# when missing. WDSCPP_PYTHONPATH: where `import wdscpp` finds the built package (default:
# build/python). Nothing of webdataset's is copied into this project: the run works on a
# scratch copy in OUT_DIR (default /tmp/wds-suite). The network is cut (a curl that fails at
# once), so tests that need it fail fast on both sides.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
ref=$(cd "${1:?webdataset checkout}" && pwd)
ours=${2:-$root/build/python}
out=${3:-/tmp/wds-suite}
python=${PYTHON:-/usr/bin/python3}

rm -rf "$out" && mkdir -p "$out/bin"
cp -r "$ref/tests" "$ref/testdata" "$out/"
[ -f "$out/testdata/imagenet-000000.tgz" ] ||
  "$python" "$here/make_standin.py" "$out/testdata/imagenet-000000.tgz"
printf '#!/bin/sh\necho "curl: no network in this run" >&2\nexit 6\n' > "$out/bin/curl"
chmod +x "$out/bin/curl"

run() {  # name, PYTHONPATH
  (cd "$out" && PATH="$out/bin:$PATH" PYTHONPATH="$2" timeout 1800 "$python" -m pytest -q \
     -p no:cacheprovider --continue-on-collection-errors -rA tests > "$out/$1.log" 2>&1 || true)
  grep -E '^(PASSED|FAILED|ERROR) ' "$out/$1.log" | sed -E 's/ - .*//' | sort > "$out/$1.results"
}
run webdataset "$ref/src"
run wdscpp "$here/shim:$ours"
"$python" - "$out" <<'PY'
import sys
out = sys.argv[1]
def load(name):
    res = {}
    for line in open(f"{out}/{name}.results"):
        status, test = line.split(maxsplit=1)
        res[test.strip()] = status
    return res
ref, ours = load("webdataset"), load("wdscpp")
passed = sorted(t for t, s in ref.items() if s == "PASSED")
both = [t for t in passed if ours.get(t) == "PASSED"]
print(f"webdataset: {len(passed)} of {len(ref)} tests pass")
print(f"wdscpp:     {len(both)} of those {len(passed)} pass ({100 * len(both) / max(1, len(passed)):.1f}%)"
      f"; {sum(1 for s in ours.values() if s == 'PASSED')} pass in all")
for t in passed:
    if ours.get(t) != "PASSED":
        print(f"  not passing on wdscpp: {t} ({ours.get(t, 'not collected')})")
PY
