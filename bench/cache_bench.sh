#!/usr/bin/env bash
# The cost of the cache's checksums: `wds bench` over shards read from the cache (every block
# verified) against `wds bench` over the very same cache files read as local files (no
# checksum), both from the page cache, interleaved by farm-bench (medians, peak RSS).
#   bench/cache_bench.sh [DIR] [RUNS] [PASSES]   (build/ must have wds and make_synthetic_shards)
# The cache is filled once through a loopback HTTP server, which is then stopped: cached reads
# make no request.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-/tmp/wds-cache-bench}
runs=${2:-9}
passes=${3:-4}
if [ ! -f "$dir/data/train-000007.tar" ]; then
  build/examples/make_synthetic_shards "$dir/data" --shards 8 --samples 1000 --size 256 --seed 1
fi
rm -rf "$dir/cache" "$dir/port"
python3 - "$dir/data" "$dir/port" <<'PY' &
import functools, http.server, sys
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass
handler = functools.partial(Quiet, directory=sys.argv[1])
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
open(sys.argv[2] + ".tmp", "w").write(str(server.server_address[1]))
__import__("os").rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
PY
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
while [ ! -s "$dir/port" ]; do sleep 0.1; done
url="http://127.0.0.1:$(cat "$dir/port")/train-{000000..000007}.tar"
build/tools/wds bench --parallel-parts 1 --cache-dir "$dir/cache" "$url" > /dev/null
kill $server
trap - EXIT
entries=$(ls "$dir/cache"/train-*.tar.* | grep -v '\.sum$' | sort)
[ "$(echo "$entries" | wc -l)" = 8 ] || { echo "cache not filled" >&2; exit 1; }
echo "$(du -shc $entries | tail -1 | cut -f1) in 8 cached shards, $passes passes per run"
# A: through the cache (verified); B: the same files as local paths.
# shellcheck disable=SC2086
farm-bench -n "$runs" --timeout 900 \
  --vs "build/tools/wds bench --passes $passes $(echo $entries)" \
  -- build/tools/wds bench --passes "$passes" --cache-dir "$dir/cache" "$url"
