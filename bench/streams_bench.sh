#!/usr/bin/env bash
# Canonical streams as users run them (wds bench, wds ls), with peak RSS beside every figure:
# 1. the cost of the stream mode against today's split: tiny samples through a 2-worker loader,
#    shard shuffle on and 1,000 samples buffered per worker either way (one buffer of 1,000, or
#    4 streams x 250), repetitions interleaved, medians;
# 2. the time from restore() to the first sample on a 100-shard dataset from local files: a
#    whole `wds ls --restore STATE --stop-after 1` (process start, URLs, restore, first sample)
#    next to the same command without --restore.
#   bench/streams_bench.sh [DIR] [REPS]     (build/ must be built; DIR keeps the shards)
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/wds-streams-bench}
reps=${2:-5}
mkdir -p "$dir"
python3 - "$dir" <<'PY'
import io, os, sys, tarfile
d = sys.argv[1]
def shard(path, n, tag):
    if os.path.exists(path):
        return
    with tarfile.open(path + ".tmp", "w", format=tarfile.USTAR_FORMAT) as t:
        for k in range(n):
            for ext, data in (("cls", str(k % 10).encode()), ("txt", f"{tag} {k}".encode())):
                info = tarfile.TarInfo(f"{tag}_{k:06d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    os.rename(path + ".tmp", path)
for i in range(8):
    shard(f"{d}/tiny-{i}.tar", 10000, f"t{i}")
os.makedirs(f"{d}/many", exist_ok=True)
for i in range(100):
    shard(f"{d}/many/shard-{i:03d}.tar", 1000, f"m{i:03d}")
PY
python3 - "$dir" "$reps" <<'PY'
import json, statistics, subprocess, sys, time
d, reps = sys.argv[1], int(sys.argv[2])
wds = "build/tools/wds"
def timed(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, check=True, capture_output=True,
                       text=True)
    return time.perf_counter() - t0, int(r.stderr.strip().splitlines()[-1]) / 1024, r.stdout
tiny = f"{d}/tiny-{{0..7}}.tar"
modes = {"split": ["--shuffle", "1000"], "streams": ["--streams", "8", "--shuffle", "250"]}
res = {m: ([], []) for m in modes}
for _ in range(reps):
    for m, opts in modes.items():
        _, rss, out = timed([wds, "bench", "--shuffle-shards", "--seed", "1", "--workers", "2",
                             "--passes", "5", "--json"] + opts + [tiny])
        res[m][0].append(json.loads(out.strip().splitlines()[-1])["samples_per_s"])
        res[m][1].append(rss)
print(f"tiny samples (8 x 10,000), 2 loader workers, 5 passes, {reps} repetitions interleaved")
for m in modes:
    print(f"  {m:<8} {statistics.median(res[m][0]):>10,.0f} samples/s   peak RSS "
          f"{statistics.median(res[m][1]):.0f} MB")
print(f"  streams / split: {statistics.median(res['streams'][0]) / statistics.median(res['split'][0]):.1%}"
      f"  (per repetition: "
      + ", ".join(f"{s / p:.1%}" for s, p in zip(res["streams"][0], res["split"][0])) + ")")

many = f"{d}/many/shard-{{000..099}}.tar"
print("100 shards x 1,000 samples; wds ls --streams 100 --shuffle-shards --epoch 100000, "
      "state after 50,000 samples")
for shuffle in ("100", "1000"):
    common = [wds, "ls", "--streams", "100", "--shuffle", shuffle, "--shuffle-shards",
              "--epoch", "100000"]
    state = f"{d}/state-{shuffle}"
    subprocess.run(common + ["--stop-after", "50000", "--save-state", state, many], check=True,
                   stdout=subprocess.DEVNULL)
    fresh, restored, rss = [], [], []
    for _ in range(reps):
        fresh.append(timed(common + ["--stop-after", "1", many])[0])
        t, m, _ = timed(common + ["--restore", state, "--stop-after", "1", many])
        restored.append(t)
        rss.append(m)
    print(f"  --shuffle {shuffle:>4} per stream ({int(shuffle) * 100:,} samples buffered): "
          f"restore to first sample {statistics.median(restored):.3f} s, fresh start to first "
          f"sample {statistics.median(fresh):.3f} s (whole process), peak RSS "
          f"{statistics.median(rss):.0f} MB")
PY
