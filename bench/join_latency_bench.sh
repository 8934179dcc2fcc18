#!/usr/bin/env bash
# Shard sets joined by key, remote: `wds bench IMG --join CAP --join EMB` (3 sets; images: jpg +
# cls, captions: txt, embeddings: npy) from nginx behind the shaping proxy (bench/shaping_proxy.cpp:
# each response's first byte after DELAY ms, each connection capped at RATE MB/s), with
# read-ahead at its default (2) and off (--read-ahead 0). With BEFORE=path/to/an/older/wds the
# same runs with that binary come first. Best of 3 wall times; peak RSS (/usr/bin/time -f %M)
# beside each.
#   bench/join_latency_bench.sh [SHARDS] [SAMPLES] [DELAY_MS] [RATE_MB_S]
#   (default 16 shards x 100 samples, ~4 MB per image shard; 50 ms; 50 MB/s)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
shards=${1:-16}
samples=${2:-100}
delay=${3:-50}
rate=${4:-50}
# shellcheck source=bench/shaped_http.sh
source bench/shaped_http.sh

python3 - "$work/data" "$shards" "$samples" <<'PY'
import io, os, sys, tarfile
d, shards, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d)
SETS = {"img": {"jpg": 40000, "cls": 2}, "cap": {"txt": 100}, "emb": {"npy": 3000}}
for s in range(shards):
    for name, fields in SETS.items():
        with tarfile.open(f"{d}/{name}-{s}.tar", "w", format=tarfile.USTAR_FORMAT) as t:
            for k in range(n):
                for ext, size in fields.items():
                    data = bytes([(k + s + len(ext)) % 251]) * size
                    info = tarfile.TarInfo(f"s{s}/{k:06d}.{ext}")
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
PY
shaped_http_start "$work/data" "$delay" "$rate"
base="http://127.0.0.1:$proxy_port"
last=$((shards - 1))
bytes=$(cat "$work/data"/*.tar | wc -c)
args=("$base/img-{0..$last}.tar" --join "$base/cap-{0..$last}.tar" --join "$base/emb-{0..$last}.tar")

row() {  # binary, reader, "seconds rss"
  read -r t rss _ <<<"$3"
  awk -v w="$1" -v r="$2" -v t="$t" -v rss="$rss" -v b="$bytes" -v n="$((shards * samples))" \
    'BEGIN { printf "%-8s %-16s %7.3f s %8.0f samples/s %7.1f MB/s %5.0f MB RSS\n",
             w, r, t, n / t, b / 1e6 / t, rss / 1024 }'
}

echo "3 sets x $shards shards, $(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1e6}') MB, $((shards * samples)) samples; ${delay} ms first byte, ${rate} MB/s/conn; wds bench, 1 worker, no decode"
for bin in ${BEFORE:+"before:$BEFORE"} "after:$build/tools/wds"; do
  row "${bin%%:*}" "read-ahead 0" "$(best "${bin#*:}" bench "${args[@]}" --read-ahead 0)"
  row "${bin%%:*}" "read-ahead 2" "$(best "${bin#*:}" bench "${args[@]}" --read-ahead 2)"
done
