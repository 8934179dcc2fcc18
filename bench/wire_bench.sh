#!/usr/bin/env bash
# Shards read over a wire of a given speed: nginx in a network namespace of its own, behind a
# veth pair whose server side sends through a token bucket (tc tbf) at RATE, read by `curl` (one
# process, one kept-alive connection) and by `wds bench` (raw samples, no decode) with one Loader
# worker, on the calling thread (--workers 0) and with 4 workers, in the same run. Where the wire
# is slower than the two cores, it is what a reader should keep up with; "unlimited" is the
# veth alone, where nginx, the kernel's delivery and the reader share the cores as on loopback.
# Best of 3 wall times (process start included); peak RSS (/usr/bin/time -f %M) of that run and
# the highest of the 3 beside each. With OLD_BUILD set (a build folder with tools/wds), its `wds`
# reads the same way in the same run, after each row of this one.
# Needs root, iproute2 (ip, tc) and nginx.
#   [OLD_BUILD=DIR] bench/wire_bench.sh [SHARDS] [SAMPLES] [RATE ...]
#   (default 8 shards x 2000 samples, ~54 MB each; 8gbit 4gbit 2gbit unlimited)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD:-build}
shards=${1:-8}
samples=${2:-2000}
shift $(($# > 2 ? 2 : $#))
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(8gbit 4gbit 2gbit unlimited)
for tool in ip tc nginx; do
  command -v "$tool" >/dev/null || { echo "wire_bench: needs $tool (root, iproute2, nginx)" >&2; exit 1; }
done
# shellcheck source=bench/shaped_http.sh
source bench/shaped_http.sh  # $work, best()

ns="wds-wire-$$"
host_if="wwh$$" ns_if="wwn$$"
nginx_pid=""
wire_cleanup() {
  if [ -n "$nginx_pid" ]; then kill "$nginx_pid" 2>/dev/null || true; fi
  ip link del "$host_if" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  cleanup
}
trap wire_cleanup EXIT

"$build/examples/make_synthetic_shards" "$work/data" --shards "$shards" --samples "$samples" \
  --size 256 >/dev/null

# The wire: 10.231.0.1 here, 10.231.0.2 in the namespace.
ip netns add "$ns"
ip link add "$host_if" type veth peer name "$ns_if"
ip link set "$ns_if" netns "$ns"
ip addr add 10.231.0.1/30 dev "$host_if"
ip link set "$host_if" up
ip netns exec "$ns" ip addr add 10.231.0.2/30 dev "$ns_if"
ip netns exec "$ns" ip link set "$ns_if" up
ip netns exec "$ns" ip link set lo up

mkdir -p "$work/nginx"
cat >"$work/nginx/nginx.conf" <<EOF
daemon off;
master_process off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  default_type application/octet-stream;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 10000;
  server {
    listen 10.231.0.2:8080;
    root $work/data;
  }
}
EOF
ip netns exec "$ns" nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" &
nginx_pid=$!
mapfile -t names < <(cd "$work/data" && ls -- *.tar)
urls=()
for n in "${names[@]}"; do urls+=("http://10.231.0.2:8080/$n"); done
for _ in $(seq 50); do curl -sf -o /dev/null "${urls[0]}" && break; sleep 0.1; done
bytes=$(cat "$work/data"/*.tar | wc -c)
curl_args=()
for u in "${urls[@]}"; do curl_args+=(-o /dev/null "$u"); done

row() {  # wire, reader, "seconds rss max_rss", curl's seconds (or 0)
  read -r t rss max_rss <<<"$3"
  awk -v w="$1" -v r="$2" -v t="$t" -v rss="$rss" -v m="$max_rss" -v ref="$4" -v b="$bytes" 'BEGIN {
    printf "%-10s %-34s %7.3f s %8.1f MB/s %6.0f MB RSS (max %4.0f)", w, r, t, b / 1e6 / t,
      rss / 1024, m / 1024;
    if (ref > 0) printf "   %5.1f%% of curl", 100 * ref / t;
    printf "\n" }'
}

echo "$shards shards, $(awk -v b="$bytes" 'BEGIN{printf "%.1f", b/1e6}') MB, $((shards * samples)) samples; wds bench raw (no decode)"
for rate in "${rates[@]}"; do
  if [ "$rate" = unlimited ]; then
    ip netns exec "$ns" tc qdisc del dev "$ns_if" root 2>/dev/null || true
  else
    ip netns exec "$ns" tc qdisc replace dev "$ns_if" root tbf rate "$rate" burst 1mb latency 10ms
  fi
  t_curl=$(best curl -sf "${curl_args[@]}")
  row "$rate" "curl, one connection" "$t_curl" 0
  ref=${t_curl%% *}
  for readers in "1 worker:--workers 1 --num-workers 1" "--workers 0:--workers 0" \
    "4 workers:--workers 4 --num-workers 4"; do
    read -ra args <<<"${readers#*:}"
    row "$rate" "wds bench, ${readers%%:*}" "$(best "$build/tools/wds" bench "${args[@]}" "${urls[@]}")" "$ref"
    if [ -n "${OLD_BUILD:-}" ]; then
      row "$rate" "  old, ${readers%%:*}" "$(best "$OLD_BUILD/tools/wds" bench "${args[@]}" "${urls[@]}")" "$ref"
    fi
  done
done
