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
# SOURCE=http or SOURCE=s3 reads the shards from nginx or Ceph's RGW on loopback instead of the
# files (scripts/test-servers.sh, started and stopped here); the ceiling still decodes from
# memory. WEBDATASET_SRC (webdataset's source, holding the webdataset/ package) adds the peer:
# webdataset with decode("rgb8") (PIL), 2 DataLoader workers, reading the same URLs (pipe:curl
# for S3). An OLD_BUILD without a Python module is measured through the tool only.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/wds-photo}
reps=${2:-3}
old=${3:-}
if [ ! -f "$dir/train-000007.tar" ]; then
  # 8 x 250 JPEGs, nine in ten of about 500x375, one in ten of 1-2 MP, quality 90
  build/examples/make_synthetic_shards "$dir" --shards 8 --samples 250 --seed 1 --photo
fi
source=${SOURCE:-file}
if [ "$source" != file ]; then
  state=$(mktemp -d)
  trap 'scripts/test-servers.sh stop "$state" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
  WDS_TEST_SERVERS=$([ "$source" = s3 ] && echo s3 || echo "") \
    scripts/test-servers.sh start "$dir" "$state" >/dev/null
  # shellcheck disable=SC1091
  source "$state/env"
  export AWS_ACCESS_KEY_ID=${WDS_TEST_AWS_ACCESS_KEY_ID:-} AWS_REGION=us-east-1
  export AWS_SECRET_ACCESS_KEY=${WDS_TEST_AWS_SECRET_ACCESS_KEY:-}
  export AWS_ENDPOINT_URL=${WDS_TEST_S3_ENDPOINT:-}
fi
python3 - "$dir" "$reps" "$old" "$source" <<'PY'
import json, statistics, subprocess, sys, glob, os
d, reps, old, source = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
shards = sorted(glob.glob(d + "/train-*.tar"))
last = "{000000..%06d}.tar" % (len(shards) - 1)
prefix = {"file": d + "/train-",
          "http": os.environ.get("WDS_TEST_HTTP", "") + "/train-",
          "s3": "s3://%s/shards/train-" % os.environ.get("WDS_TEST_S3_BUCKET", "")}[source]
pattern = prefix + last
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
    out, rss = timed(["/usr/bin/python3", "-c", pyscript, pattern], env)
    return float(out), rss
def ceiling():
    out = subprocess.run(["build/bench/loader_bench", "--imdecode", "--threads=2"] + shards,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["img_per_s"], 0
peer_script = """
import sys, time, torch, webdataset as wds
ds = wds.WebDataset(sys.argv[1:], shardshuffle=True, nodesplitter=None).shuffle(1000).decode('rgb8').to_tuple('jpg', 'cls')
t0 = time.perf_counter(); n = 0
for item in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2):
    n += 1
print(n / (time.perf_counter() - t0))
"""
def peer():
    names = [os.path.basename(s) for s in shards]
    if source == "file":
        urls = shards
    elif source == "http":
        urls = [os.environ["WDS_TEST_HTTP"] + "/" + n for n in names]
    else:
        e = os.environ
        urls = ["pipe:curl -s -f --aws-sigv4 aws:amz:us-east-1:s3 --user "
                f"{e['AWS_ACCESS_KEY_ID']}:{e['AWS_SECRET_ACCESS_KEY']} -H 'x-amz-content-sha256: "
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' "
                f"{e['AWS_ENDPOINT_URL']}/{e['WDS_TEST_S3_BUCKET']}/shards/{n}" for n in names]
    env = dict(os.environ, PYTHONPATH=os.environ["WEBDATASET_SRC"])
    out, rss = timed(["/usr/bin/python3", "-c", peer_script] + urls, env)
    return float(out), rss
cases = [("cv::imdecode, 2 threads (ceiling)", ceiling)]
for name, b in builds:
    cases += [(f"{name}: wds bench rgb8", lambda b=b: wds(b, [])),
              (f"{name}: wds bench rgb8 --resize 256 --crop 224 --batch 64", lambda b=b: wds(b, evalopts))]
    if os.path.isdir(b + "/python"):
        cases.append((f"{name}: Python Loader rgb8", lambda b=b: python(b)))
if os.environ.get("WEBDATASET_SRC"):
    cases.append(("webdataset, decode('rgb8'), 2 DataLoader workers", peer))
got = {name: [] for name, _ in cases}
for r in range(reps):
    for name, fn in cases:
        got[name].append(fn())
ceil = statistics.median(v for v, _ in got[cases[0][0]])
print(f"{len(shards)} shards from {source}, {reps} repetitions interleaved, medians; photo-shaped JPEGs")
for name, _ in cases:
    v = statistics.median(x for x, _ in got[name]); m = max(x for _, x in got[name])
    runs = "/".join(f"{x:.0f}" for x, _ in got[name])
    print(f"{name:<58}{v:9.1f} img/s {100 * v / ceil:6.1f}% of ceiling  peak RSS {m:5.0f} MB  runs {runs}")
PY
