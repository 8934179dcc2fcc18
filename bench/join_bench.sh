#!/usr/bin/env bash
# Shard sets joined by key (WebDatasetOptions::join, `wds bench --join`) against one shard set
# holding the same samples and bytes, as users run it, with peak RSS beside every figure:
# 3 sets (images: jpg + cls; captions: txt; embeddings: npy) joined, or one set of all four
# fields. Two shapes: photo-sized samples (a 40 KB jpg, 3 KB npy) and tiny ones (tens of bytes,
# where the join's per-sample work shows most). Local files from the page cache (one warm-up
# run each), repetitions interleaved; best and spread.
#   bench/join_bench.sh [DIR] [REPS] [WORKERS]   (build/ must be built; DIR keeps the shards)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/wds-join-bench}
reps=${2:-5}
workers=${3:-1}
mkdir -p "$dir"
python3 - "$dir" <<'PY'
import io, os, sys, tarfile
d = sys.argv[1]
SHAPES = {  # shards, samples per shard, field sizes
    "photo": (8, 1000, {"jpg": 40000, "cls": 2, "txt": 100, "npy": 3000}),
    "tiny": (8, 20000, {"jpg": 40, "cls": 2, "txt": 30, "npy": 64}),
}
COLUMNS = {"img": ("cls", "jpg"), "cap": ("txt",), "emb": ("npy",)}
def write(path, shard, n, exts, sizes):
    if os.path.exists(path):
        return
    with tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT) as t:
        for k in range(n):
            for ext in exts:
                data = bytes([(k + len(ext)) % 251]) * sizes[ext]
                info = tarfile.TarInfo(f"s{shard}/{k:06d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    os.rename(path + ".tmp", path)
for shape, (shards, n, sizes) in SHAPES.items():
    for s in range(shards):
        write(f"{d}/{shape}-all-{s}.tar", s, n, ("cls", "jpg", "npy", "txt"), sizes)
        for col, exts in COLUMNS.items():
            write(f"{d}/{shape}-{col}-{s}.tar", s, n, exts, sizes)
PY
python3 - "$dir" "$reps" "$workers" <<'PY'
import json, subprocess, sys
d, reps, workers = sys.argv[1], int(sys.argv[2]), sys.argv[3]
wds = "build/tools/wds"
def run(args):
    r = subprocess.run(["/usr/bin/time", "-f", "%M", wds, "bench", "--json", "--workers", workers,
                        "--passes", "3"] + args, check=True, capture_output=True, text=True)
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["samples_per_s"], j["MB_per_s"], int(r.stderr.strip().splitlines()[-1]) / 1024, j
for shape in ("photo", "tiny"):
    one = [f"{d}/{shape}-all-{{0..7}}.tar"]
    joined = [f"{d}/{shape}-img-{{0..7}}.tar", "--join", f"{d}/{shape}-cap-{{0..7}}.tar",
              "--join", f"{d}/{shape}-emb-{{0..7}}.tar"]
    modes = {"one set": one, "3 joined": joined}
    for args in modes.values():
        run(args)  # warm the page cache
    res = {m: [] for m in modes}
    for _ in range(reps):
        for m, args in modes.items():
            res[m].append(run(args))
    samples = res["one set"][0][3]["samples"]
    print(f"{shape}: {samples:,} samples per run (3 passes), --workers {workers}, {reps} "
          "repetitions interleaved")
    for m in modes:
        best = max(res[m], key=lambda r: r[0])
        print(f"  {m:<9} best {best[0]:>10,.0f} samples/s {best[1]:>7,.0f} MB/s   runs "
              + ", ".join(f"{r[0]:,.0f}" for r in res[m])
              + f"   peak RSS {max(r[2] for r in res[m]):.0f} MB")
    b = max(r[0] for r in res["3 joined"]) / max(r[0] for r in res["one set"])
    print(f"  joined / one set (best of each): {b:.1%}; per repetition: "
          + ", ".join(f"{j[0] / o[0]:.1%}" for j, o in zip(res["3 joined"], res["one set"])))
PY
