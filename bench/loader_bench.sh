#!/usr/bin/env bash
# The decoding loader as users run it, next to its ceiling measured in the same run:
#   wds bench --shuffle 1000 --decode rgb8 --tuple 'jpg cls' --batch 64 --workers 2 [--crop 224 |
#   --resize 128] [--passes 10] --json
# against loader_bench --imdecode (cv::imdecode from memory on 2 threads over the same JPEGs,
# with the same reduced decoding and resize where the case has them), repetitions interleaved,
# medians; peak RSS of the wds process beside each figure, for 1 and for 10 passes.
#   bench/loader_bench.sh [DIR] [REPS]     (build/ must be built; DIR keeps the shards)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/wds-loader-bench}
reps=${2:-3}
if [ ! -f "$dir/img/train-000015.tar" ]; then
  build/examples/make_synthetic_shards "$dir/img" --shards 16 --samples 1000 --size 256 --seed 1
fi
python3 - "$dir/img" "$reps" <<'PY'
import glob, json, statistics, subprocess, sys
img, reps = sys.argv[1], int(sys.argv[2])
shards = sorted(glob.glob(img + "/train-*.tar"))
pattern = img + "/train-{000000..000015}.tar"
base = ["build/tools/wds", "bench", "--shuffle", "1000", "--shuffle-shards", "--decode", "rgb8",
        "--tuple", "jpg cls", "--batch", "64", "--workers", "2", "--json"]
# (name, wds options, imdecode options): 256x256 JPEGs; --crop 224 resizes to 224 then crops;
# --resize 128 decodes at 1/2 scale (exactly 128).
cases = [("rgb8", [], []),
         ("rgb8 --crop 224", ["--crop", "224"], ["--resize=224"]),
         ("rgb8 --resize 128", ["--resize", "128"], ["--reduce=2"])]
def wds(opts, passes):
    out = subprocess.run(base + opts + ["--passes", str(passes), pattern], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])
def ceiling(opts):
    out = subprocess.run(["build/bench/loader_bench", "--imdecode", "--threads=2"] + opts + shards,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["img_per_s"]
print(f"{len(shards)} shards of 256x256 JPEGs, {reps} repetitions interleaved (medians)")
print(f"{'case':<22}{'imdecode img/s':>16}{'wds img/s':>12}{'share':>8}{'RSS 1 pass':>12}"
      f"{'RSS 10 passes':>15}{'10-pass img/s':>15}")
for name, wopts, copts in cases:
    c, w, rss1, rss10, w10 = [], [], [], [], []
    wds(wopts, 1)  # page cache warm
    for r in range(reps):
        if r % 2 == 0:
            c.append(ceiling(copts)); j = wds(wopts, 1)
        else:
            j = wds(wopts, 1); c.append(ceiling(copts))
        w.append(j["samples_per_s"]); rss1.append(j["peak_rss_mb"])
    j = wds(wopts, 10)
    rss10.append(j["peak_rss_mb"]); w10.append(j["samples_per_s"])
    mc, mw = statistics.median(c), statistics.median(w)
    print(f"{name:<22}{mc:>16.0f}{mw:>12.0f}{100 * mw / mc:>7.1f}%{max(rss1):>10.0f}MB"
          f"{max(rss10):>13.0f}MB{statistics.median(w10):>15.0f}")
PY
