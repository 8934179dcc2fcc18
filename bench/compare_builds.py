#!/usr/bin/env python3
"""Two builds of `wds` on the same shards, repetitions interleaved, medians and peak RSS.

    bench/compare_builds.py OLD_WDS NEW_WDS [DIR] [REPS]

DIR holds the shards of bench/loader_bench.sh (tiny-{0..7}.tar and img/); run that script once
first. Build the old tool from a worktree, e.g.
    git worktree add /tmp/old-wds REV && cmake -S /tmp/old-wds -B /tmp/old-wds/build -G Ninja \
      -DWDS_BUILD_TESTS=OFF -DWDS_BUILD_BENCH=OFF -DWDS_BUILD_EXAMPLES=OFF && \
      cmake --build /tmp/old-wds/build --target wds_tool
"""
import json
import statistics
import subprocess
import sys

old, new = sys.argv[1], sys.argv[2]
data = sys.argv[3] if len(sys.argv) > 3 else "/tmp/wds-loader-bench"
reps = int(sys.argv[4]) if len(sys.argv) > 4 else 5
shuffle = ["--shuffle", "1000", "--shuffle-shards"]
tiny = data + "/tiny-{0..7}.tar"
cases = [
    ("tiny samples, 2 loader workers", shuffle + ["--workers", "2"], tiny),
    ("tiny samples, in-process", shuffle + ["--workers", "0"], tiny),
    ("JPEG rgb8, batch 64, 2 workers",
     shuffle + ["--decode", "rgb8", "--tuple", "jpg cls", "--batch", "64", "--workers", "2"],
     data + "/img/train-{000000..000015}.tar"),
]
runs = {}
for _ in range(reps):
    for name, opts, pattern in cases:
        for label, exe in (("old", old), ("new", new)):
            out = subprocess.run([exe, "bench", *opts, "--json", pattern], check=True,
                                 capture_output=True, text=True).stdout
            j = json.loads(out.strip().splitlines()[-1])
            runs.setdefault((name, label), []).append((j["samples_per_s"], j["peak_rss_mb"]))
for name, _, _ in cases:
    med = {k: statistics.median(s for s, _ in runs[(name, k)]) for k in ("old", "new")}
    rss = {k: max(m for _, m in runs[(name, k)]) for k in ("old", "new")}
    print(f"{name}: old {med['old']:,.0f}/s {rss['old']:.0f} MB | new {med['new']:,.0f}/s "
          f"{rss['new']:.0f} MB | new/old {med['new'] / med['old']:.3f}")
