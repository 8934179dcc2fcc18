#!/usr/bin/env bash
# The main job on photo-shaped data, as users run it, beside its ceiling in the same run:
#   wds bench --shuffle 1000 --shuffle-shards --decode rgb8 --tuple 'jpg cls' --workers 2 [--json]
#   the same with --resize 256 --crop 224 --batch 64 (evaluation shape: fixed-size batches)
#   Python: wdscpp.Loader(WebDataset(...).shuffle(1000).decode('rgb8').to_tuple(...), workers=2)
# against loader_bench --imdecode --threads=2 (cv::imdecode from memory over the same JPEGs);
# peak RSS from /usr/bin/time -f %M. Repetitions interleaved, medians. With OLD_BUILD (another
# checkout's build dir, tools and Python module built), the same wds and Python runs of that
# build are interleaved too, as the before of a change.
#   bench/photo_bench.sh [DIR] [REPS] [OLD_BUILD]     (build/ must be built; DIR keeps the shards)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/wds-photo}
reps=${2:-3}
old=${3:-}
if [ ! -f "$dir/train-000007.tar" ]; then
  # 8 x 250 JPEGs, nine in ten of about 500x375, one in ten of 1-2 MP, quality 90
  build/examples/make_synthetic_shards "$dir" --shards 8 --samples 250 --seed 1 --photo
fi
python3 - "$dir" "$reps" "$old" <<'PY'
import json, statistics, subprocess, sys, glob, os
d, reps, old = sys.argv[1], int(sys.argv[2]), sys.argv[3]
shards = sorted(glob.glob(d + "/train-*.tar"))
pattern = d + "/train-{000000..%06d}.tar" % (len(shards) - 1)
builds = [("new", "build")] + ([("old", old)] if old else [])
base = ["bench", "--shuffle", "1000", "--shuffle-shards", "--decode", "rgb8", "--tuple", "jpg cls",
        "--workers", "2", "--json"]
evalopts = ["--resize", "256", "--crop", "224", "--batch", "64"]
pyscript = """
import resource, sys, time, wdscpp
ds = wdscpp.WebDataset(sys.argv[1], shardshuffle=True, seed=1).shuffle(1000).decode('rgb8').to_tuple('jpg', 'cls')
t0 = time.perf_counter(); n = 0
for item in wdscpp.Loader(ds, workers=2):
    n += 1
print(n / (time.perf_counter() - t0))
"""
def timed(cmd, env=None):
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, check=True, capture_output=True,
                       text=True, env=env)
    return r.stdout.strip().splitlines()[-1], int(r.stderr.strip().splitlines()[-1]) / 1024
def wds(build, opts):
    out, rss = timed([build + "/tools/wds"] + base + opts + [pattern])
    return json.loads(out)["samples_per_s"], rss
def python(build):
    env = dict(os.environ, PYTHONPATH=build + "/python")
    out, rss = timed(["python3", "-c", pyscript, pattern], env)
    return float(out), rss
def ceiling():
    out = subprocess.run(["build/bench/loader_bench", "--imdecode", "--threads=2"] + shards,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["img_per_s"], 0
cases = [("cv::imdecode, 2 threads (ceiling)", ceiling)]
for name, b in builds:
    cases += [(f"{name}: wds bench rgb8", lambda b=b: wds(b, [])),
              (f"{name}: wds bench rgb8 --resize 256 --crop 224 --batch 64", lambda b=b: wds(b, evalopts)),
              (f"{name}: Python Loader rgb8", lambda b=b: python(b))]
got = {name: [] for name, _ in cases}
for r in range(reps):
    for name, fn in cases:
        got[name].append(fn())
ceil = statistics.median(v for v, _ in got[cases[0][0]])
print(f"{len(shards)} shards, {reps} repetitions interleaved, medians; photo-shaped JPEGs")
for name, _ in cases:
    v = statistics.median(x for x, _ in got[name]); m = max(x for _, x in got[name])
    runs = "/".join(f"{x:.0f}" for x, _ in got[name])
    print(f"{name:<58}{v:9.1f} img/s {100 * v / ceil:6.1f}% of ceiling  peak RSS {m:5.0f} MB  runs {runs}")
PY
