#!/usr/bin/env python3
"""What reading K shards at once per worker costs (WebDatasetOptions::interleave_shards, the
tool's --interleave): `wds bench` with --interleave 1 and 4 over local shards, repetitions
interleaved, medians of samples/s and peak RSS (/usr/bin/time -f %M), for tiny samples (the
per-sample cost of the round-robin) and 100 KiB samples (the k open shards' buffers).

    bench/interleave_bench.py [DIR] [REPS]     (build/ must be built; DIR keeps the shards)
"""
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WDS = os.path.join(ROOT, "build", "tools", "wds")


def write_shard(path, samples, payload):
    """`samples` samples of a class number and a text of `payload` bytes (a few when 0)."""
    if os.path.exists(path):
        return
    stem = os.path.basename(path).split(".")[0]
    with tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT) as tar:
        for k in range(samples):
            text = f"{stem} {k}".encode()
            if payload:
                text = (text * (payload // len(text) + 1))[:payload]
            for ext, data in (("cls", str(k % 10).encode()), ("txt", text)):
                member = tarfile.TarInfo(f"{stem}_{k:06d}.{ext}")
                member.size = len(data)
                tar.addfile(member, io.BytesIO(data))
    os.rename(path + ".tmp", path)


def bench(pattern, k, passes):
    cmd = ["/usr/bin/time", "-f", "%M", WDS, "bench", "--shuffle-shards", "--seed", "1",
           "--shuffle", "1000", "--workers", "2", "--passes", str(passes), "--interleave", str(k),
           "--json", pattern]
    r = subprocess.run(cmd, check=True, capture_output=True, text=True)
    samples_per_s = json.loads(r.stdout.strip().splitlines()[-1])["samples_per_s"]
    return samples_per_s, int(r.stderr.strip().splitlines()[-1]) / 1024


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "/tmp/wds-interleave-bench"
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    os.makedirs(d, exist_ok=True)
    # About 2-4 s a run on 2 cores, so that other work on the machine averages out more.
    sets = (("tiny samples, 8 x 10,000", "tiny", 10000, 0, 5),
            ("100 KiB samples, 8 x 250", "big", 250, 100 * 1024, 20))
    for name, prefix, samples, payload, passes in sets:
        for i in range(8):
            write_shard(f"{d}/{prefix}-{i}.tar", samples, payload)
        pattern = f"{d}/{prefix}-{{0..7}}.tar"
        res = {k: ([], []) for k in (1, 4)}
        for _ in range(reps):
            for k, (speeds, rss) in res.items():
                s, m = bench(pattern, k, passes)
                speeds.append(s)
                rss.append(m)
        print(f"{name}, 2 loader workers, --shuffle 1000, {passes} passes, {reps} repetitions")
        for k, (speeds, rss) in res.items():
            print(f"  --interleave {k}  {statistics.median(speeds):>10,.0f} samples/s   "
                  f"peak RSS {statistics.median(rss):.0f} MB")
        ratios = [b / a for a, b in zip(res[1][0], res[4][0])]
        print(f"  4 / 1: {statistics.median(res[4][0]) / statistics.median(res[1][0]):.1%}  "
              "(per repetition: " + ", ".join(f"{r:.1%}" for r in ratios) + ")")


if __name__ == "__main__":
    main()
