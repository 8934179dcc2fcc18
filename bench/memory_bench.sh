#!/usr/bin/env bash
# Peak memory streaming one big shard through a shuffle buffer: writes a shard of small samples
# (default 2 GiB of 8 KiB samples), then runs `wds bench --shuffle 1000 --json` on it and prints
# the summary line, whose peak_rss_mb is the figure.
#   bench/memory_bench.sh [SIZE_MIB] [SAMPLE_BYTES] [DIR]      (build/tools/wds must exist)
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-2048}
sample_bytes=${2:-8192}
dir=${3:-$(mktemp -d)}
shard="$dir/big-000000.tar"
python3 - "$shard" "$size_mib" "$sample_bytes" <<'PY'
import io, os, sys, tarfile
path, size_mib, sample_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
payload = os.urandom(sample_bytes)
n = size_mib * 1024 * 1024 // (sample_bytes + 1536)  # headers and padding included
with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
    for i in range(n):
        for ext, data in (("bin", payload), ("cls", str(i % 1000).encode())):
            info = tarfile.TarInfo(f"s{i:09d}.{ext}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
print(f"{path}: {n} samples, {os.path.getsize(path) / 2**20:.0f} MiB", file=sys.stderr)
PY
echo "== shuffle buffer of 1000 samples =="
build/tools/wds bench --shuffle 1000 --json "$shard"
echo "== the same, decoded (basic) and batched by 64 on a worker thread =="
build/tools/wds bench --shuffle 1000 --decode basic --batch 64 --workers 1 --json "$shard"
rm -f "$shard"
