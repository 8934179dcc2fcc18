#!/usr/bin/env bash
# Remote shards under an object store's latency and per-connection cap: nginx behind the shaping
# proxy (bench/shaping_proxy.cpp: each response's first byte after DELAY ms, each connection
# capped at RATE MB/s), read by `wds bench` (raw: no decode, 1 loader worker), with read-ahead
# and parallel ranged GETs at their defaults and off (WDS_READ_AHEAD=0 WDS_PARALLEL_PARTS=1:
# one shard at a time, one GET each, as before them); then the same shards from nginx directly
# (0 ms, no cap), both ways. Best of 3 wall times; peak RSS (/usr/bin/time -f %M) beside each.
# With OLD_BUILD set (a build folder with tools/wds), its `wds` reads the shaped link with the
# defaults too, in the same run.
#   [OLD_BUILD=DIR] bench/latency_bench.sh [SHARDS] [SAMPLES] [DELAY_MS] [RATE_MB_S]
#   (default 8 shards x 1100 samples, ~30 MB each; 50 ms; 50 MB/s)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
shards=${1:-8}
samples=${2:-1100}
delay=${3:-50}
rate=${4:-50}
# shellcheck source=bench/shaped_http.sh
source bench/shaped_http.sh

"$build/examples/make_synthetic_shards" "$work/data" --shards "$shards" --samples "$samples" \
  --size 256 >/dev/null
shaped_http_start "$work/data" "$delay" "$rate"

mapfile -t names < <(cd "$work/data" && ls -- *.tar)
bytes=$(cat "$work/data"/*.tar | wc -c)
shaped=() direct=()
for n in "${names[@]}"; do
  shaped+=("http://127.0.0.1:$proxy_port/$n")
  direct+=("$WDS_TEST_HTTP/$n")
done

row() {  # link, reader, "seconds rss", reference MB/s (or 0)
  read -r t rss _ <<<"$3"
  awk -v l="$1" -v r="$2" -v t="$t" -v rss="$rss" -v ref="$4" -v b="$bytes" 'BEGIN {
    mbs = b / 1e6 / t;
    printf "%-22s %-34s %7.3f s %8.1f MB/s %6.0f MB RSS", l, r, t, mbs, rss / 1024;
    if (ref > 0) printf "   %5.1f%% of %.0f MB/s", 100 * mbs / ref, ref;
    printf "\n" }'
}
off=(env WDS_READ_AHEAD=0 WDS_PARALLEL_PARTS=1)

echo "$shards shards, $(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1e6}') MB, $((shards * samples)) samples; wds bench, 1 worker, no decode"
cap=$(awk -v r="$rate" 'BEGIN{print 4 * r}')
link="${delay} ms, ${rate} MB/s/conn"
row "$link" "read-ahead 0, 1 GET per shard" "$(best "${off[@]}" "$build/tools/wds" bench "${shaped[@]}")" "$cap"
row "$link" "defaults (read-ahead, parts)" "$(best "$build/tools/wds" bench "${shaped[@]}")" "$cap"
if [ -n "${OLD_BUILD:-}" ]; then
  row "$link" "  old, defaults" "$(best "$OLD_BUILD/tools/wds" bench "${shaped[@]}")" "$cap"
fi
t_off=$(best "${off[@]}" "$build/tools/wds" bench "${direct[@]}")
mbs_off=$(awk -v t="${t_off%% *}" -v b="$bytes" 'BEGIN{print b / 1e6 / t}')
row "loopback (0 ms, no cap)" "read-ahead 0, 1 GET per shard" "$t_off" 0
row "loopback (0 ms, no cap)" "defaults (read-ahead, parts)" "$(best "$build/tools/wds" bench "${direct[@]}")" "$mbs_off"
