#!/usr/bin/env bash
# The training and evaluation transforms as users run them, beside their ceilings and peers, on
# the same photo-shaped shards and the same 2 cores, repetitions interleaved, medians:
#   ceilings   transform_bench --mode=window (bare libjpeg-turbo decode of the RandomResizedCrop
#              windows wds draws) and --mode=imdecode (full cv::imdecode), JPEGs in memory
#   hand-written  transform_bench --mode=handwritten / handwritten-eval (full decode, crop,
#              cv::resize, flip, normalise to float32 CHW by hand)
#   wds        wds bench --shuffle 1000 --shuffle-shards --decode rgb8 --random-resized-crop 224
#              --flip 0.5 --normalize imagenet --layout chw --dtype float32 --tuple 'jpg cls'
#              --batch 64 --workers 2 (train); --resize 256 --crop 224 instead (eval); and plain
#              --decode rgb8 (no transform), whose figure must not drop
#   Python     wdscpp.Loader over decode('rgb8', random_resized_crop=224, ...), 2 workers
#   peer       Python webdataset + torchvision (bench/torchvision_peer.py, DataLoader with 2
#              workers), when its source is at $WEBDATASET_SRC or can be made from the fetch
#              mirror of github:webdataset/webdataset (tag v0.2.107)
# Peak RSS from /usr/bin/time -f %M; the peer's workers are other processes, so its figure is
# the largest total PSS of its processes seen after a batch (one extra run with --rss; see
# torchvision_peer.py).
# Each run makes PASSES passes over the shards (the ceilings decode every JPEG PASSES times), as
# training does epoch after epoch: the first pass's warm-up (the batch pool's first slabs, the
# shuffle buffers filling) counts once, not every time.
#   bench/transform_bench.sh [DIR] [REPS] [PASSES]   (build/ must be built, tools and Python module)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/wds-photo}
reps=${2:-3}
passes=${3:-3}
if [ ! -f "$dir/train-000007.tar" ]; then
  # 8 x 250 JPEGs, nine in ten of about 500x375, one in ten of 1-2 MP, quality 90
  build/examples/make_synthetic_shards "$dir" --shards 8 --samples 250 --seed 1 --photo
fi
mirror=/work/.mirror/webdataset+webdataset/repo
WEBDATASET_SRC=${WEBDATASET_SRC:-/tmp/webdataset-src}
if [ ! -f "$WEBDATASET_SRC/webdataset/__init__.py" ] && [ -d "$mirror" ]; then
  mkdir -p "$WEBDATASET_SRC"
  # only these paths: the mirror lacks the large test blobs a full archive would need
  git --git-dir="$mirror" archive v0.2.107 webdataset LICENSE 2>/dev/null | tar -x -C "$WEBDATASET_SRC"
fi
export WEBDATASET_SRC
/usr/bin/python3 - "$dir" "$reps" "$passes" <<'PY'
import glob, json, os, statistics, subprocess, sys
d, reps, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shards = sorted(glob.glob(d + "/train-*.tar"))
pattern = d + "/train-{000000..%06d}.tar" % (len(shards) - 1)
common = ["--tuple", "jpg cls", "--batch", "64", "--workers", "2", "--passes", str(passes), "--json"]
norm = ["--normalize", "imagenet", "--layout", "chw", "--dtype", "float32"]
train = ["--shuffle", "1000", "--shuffle-shards", "--decode", "rgb8", "--random-resized-crop",
         "224", "--flip", "0.5"] + norm + common
evaluation = ["--decode", "rgb8", "--resize", "256", "--crop", "224"] + norm + common
plain = ["--shuffle", "1000", "--shuffle-shards", "--decode", "rgb8", "--tuple", "jpg cls",
         "--workers", "2", "--passes", str(passes), "--json"]
pyscript = """
import sys, time, wdscpp
ds = (wdscpp.WebDataset(sys.argv[1], shardshuffle=True, seed=1).shuffle(1000)
      .decode('rgb8', random_resized_crop=224, flip=0.5, normalize='imagenet', layout='chw',
              dtype='float32').to_tuple('jpg', 'cls').batched(64))
loader = wdscpp.Loader(ds, workers=2)
t0 = time.perf_counter(); n = 0
for epoch in range(int(sys.argv[2])):
    for images, labels in loader:
        n += len(labels)
print(n / (time.perf_counter() - t0))
"""
def timed(cmd, env=None):
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, check=True, capture_output=True,
                       text=True, env=env)
    return r.stdout.strip().splitlines()[-1], int(r.stderr.strip().splitlines()[-1]) / 1024
def ceiling(mode):
    out, rss = timed(["build/bench/transform_bench", "--mode=" + mode, "--threads=2",
                      f"--reps={passes}"] + shards)
    return json.loads(out)["img_per_s"], rss
def wds(opts):
    out, rss = timed(["build/tools/wds", "bench"] + opts + [pattern])
    return json.loads(out)["samples_per_s"], rss
def python():
    env = dict(os.environ, PYTHONPATH="build/python")
    out, rss = timed(["/usr/bin/python3", "-c", pyscript, pattern, str(passes)], env)
    return float(out), rss
peer_memory = {}
def peer(mode):
    def run(extra):
        out = subprocess.run(["/usr/bin/python3", "bench/torchvision_peer.py", "--mode", mode,
                              "--epochs", str(passes)] + extra + shards,
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])
    if mode not in peer_memory:  # once: reading /proc after each batch slows it by 3-7%
        peer_memory[mode] = run(["--rss"])["pss_sum_max_kb"] / 1024
    return run([])["img_per_s"], peer_memory[mode]
have_peer = subprocess.run(["/usr/bin/python3", "-c", "import sys; sys.path.insert(0, '%s'); "
                            "import webdataset, torchvision" % os.environ["WEBDATASET_SRC"]],
                           capture_output=True).returncode == 0
cases = [("window decode, 2 threads (train ceiling)", lambda: ceiling("window")),
         ("cv::imdecode, 2 threads (eval ceiling)", lambda: ceiling("imdecode")),
         ("hand-written train (imdecode+crop+resize+flip+normalise)", lambda: ceiling("handwritten")),
         ("hand-written eval", lambda: ceiling("handwritten-eval")),
         ("wds bench train (RandomResizedCrop 224 ...)", lambda: wds(train)),
         ("wds bench eval (resize 256, crop 224 ...)", lambda: wds(evaluation)),
         ("wds bench rgb8 (no transform)", lambda: wds(plain)),
         ("Python wdscpp.Loader train", python)]
if have_peer:
    cases += [("webdataset + torchvision train", lambda: peer("train")),
              ("webdataset + torchvision eval", lambda: peer("eval"))]
got = {name: [] for name, _ in cases}
for r in range(reps):
    for name, fn in cases:
        got[name].append(fn())
med = {name: statistics.median(v for v, _ in got[name]) for name, _ in cases}
print(f"{len(shards)} shards, {passes} passes per run, {reps} repetitions interleaved, medians; "
      "photo-shaped JPEGs, 2 cores")
for name, _ in cases:
    m = max(x for _, x in got[name])
    runs = "/".join(f"{x:.0f}" for x, _ in got[name])
    print(f"{name:<58}{med[name]:8.1f} img/s  peak RSS {m:5.0f} MB  runs {runs}")
t, e = med[cases[4][0]], med[cases[5][0]]
print(f"train: {100 * t / med[cases[0][0]]:.1f}% of the window decode, "
      f"{t / med[cases[2][0]]:.2f}x hand-written"
      + (f", {t / med['webdataset + torchvision train']:.2f}x webdataset+torchvision" if have_peer else ""))
print(f"eval: {100 * e / med[cases[1][0]]:.1f}% of cv::imdecode, {e / med[cases[3][0]]:.2f}x hand-written"
      + (f", {e / med['webdataset + torchvision eval']:.2f}x webdataset+torchvision" if have_peer else ""))
if not have_peer:
    print("(webdataset + torchvision: not run; set WEBDATASET_SRC to webdataset's source tree)")
PY
