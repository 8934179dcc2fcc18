#!/usr/bin/env bash
# Streaming throughput of the demo-style shards from local files, nginx and an S3 server (moto),
# each next to its ceiling measured in the same run on the same files:
#   local: cat FILES > /dev/null        http: curl -o /dev/null URLS (one process, keep-alive)
#   s3:    curl --aws-sigv4 ... URLS    wds: build/tools/wds bench URLS (tar to samples)
# wds runs with its defaults and with read-ahead and parallel ranged GETs off.
# Each command runs 3 times; the best wall time counts (process start included on both sides).
#   bench/remote_bench.sh [SHARDS] [SAMPLES]      (default 16 shards x 250 samples, ~100 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
shards=${1:-16}
samples=${2:-250}
work=$(mktemp -d)
trap 'scripts/test-servers.sh stop "$work/state" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT

"$build/examples/make_synthetic_shards" "$work/data" --shards "$shards" --samples "$samples" \
  --size 256 >/dev/null
scripts/test-servers.sh start "$work/data" "$work/state" >/dev/null
# shellcheck disable=SC1091
source "$work/state/env"
export AWS_ACCESS_KEY_ID=$WDS_TEST_AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$WDS_TEST_AWS_SECRET_ACCESS_KEY
export AWS_REGION=us-east-1 AWS_ENDPOINT_URL=$WDS_TEST_S3_ENDPOINT

mapfile -t names < <(cd "$work/data" && ls -- *.tar)
bytes=$(cat "$work/data"/*.tar | wc -c)
local_files=() http_urls=() s3_urls=() s3_http=()
for n in "${names[@]}"; do
  local_files+=("$work/data/$n")
  http_urls+=("$WDS_TEST_HTTP/$n")
  s3_urls+=("s3://$WDS_TEST_S3_BUCKET/shards/$n")
  s3_http+=("$WDS_TEST_S3_ENDPOINT/$WDS_TEST_S3_BUCKET/shards/$n")
done
# Read-ahead and parallel ranged GETs off (one shard at a time, one GET each), for the same run.
off=(env WDS_READ_AHEAD=0 WDS_PARALLEL_PARTS=1)
curl_out=()
for _ in "${names[@]}"; do curl_out+=(-o /dev/null); done

best() {  # best wall time in seconds of 3 runs of "$@"
  local start end t best_t=""
  for _ in 1 2 3; do
    start=$(date +%s%N)
    "$@" >/dev/null 2>&1
    end=$(date +%s%N)
    t=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.4f", (b - a) / 1e9}')
    if [ -z "$best_t" ] || awk "BEGIN{exit !($t < $best_t)}"; then best_t=$t; fi
  done
  echo "$best_t"
}
row() {  # source, reader, seconds, ceiling seconds
  awk -v s="$1" -v r="$2" -v t="$3" -v c="$4" -v b="$bytes" 'BEGIN {
    mb = b / 1e6; t = (t > 0 ? t : 0.001); c = (c > 0 ? c : 0.001);
    printf "%-6s %-32s %8.3f s %9.1f MB/s", s, r, t, mb / t;
    if (r ~ /^wds/) printf "   %5.1f%% of the ceiling", 100 * c / t;
    printf "\n" }'
}

echo "$shards shards, $(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1e6}') MB, $((shards * samples)) samples"
t_cat=$(best cat "${local_files[@]}")
t_wl=$(best "$build/tools/wds" bench "${local_files[@]}")
row local "cat (ceiling)" "$t_cat" "$t_cat"
row local "wds bench" "$t_wl" "$t_cat"
t_curl=$(best curl -s -f "${curl_out[@]}" "${http_urls[@]}")
t_wh=$(best "$build/tools/wds" bench "${http_urls[@]}")
t_wh0=$(best "${off[@]}" "$build/tools/wds" bench "${http_urls[@]}")
row http "curl -o /dev/null (ceiling)" "$t_curl" "$t_curl"
row http "wds bench" "$t_wh" "$t_curl"
row http "wds bench, read-ahead 0, 1 GET" "$t_wh0" "$t_curl"
t_s3c=$(best curl -s -f --aws-sigv4 "aws:amz:us-east-1:s3" \
  --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" \
  -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
  "${curl_out[@]}" "${s3_http[@]}")
t_ws=$(best "$build/tools/wds" bench "${s3_urls[@]}")
t_ws0=$(best "${off[@]}" "$build/tools/wds" bench "${s3_urls[@]}")
row s3 "curl --aws-sigv4 (ceiling)" "$t_s3c" "$t_s3c"
row s3 "wds bench" "$t_ws" "$t_s3c"
row s3 "wds bench, read-ahead 0, 1 GET" "$t_ws0" "$t_s3c"
