# shellcheck shell=bash
# Sourced (from the repository root) by bench/latency_bench.sh and bench/join_latency_bench.sh:
# a scratch folder $work removed on exit with the servers, nginx serving a folder behind the
# shaping proxy (bench/shaping_proxy.cpp), and best-of-3 timing.
#   shaped_http_start DATA_DIR DELAY_MS RATE_MB_S   # sets proxy_port and WDS_TEST_HTTP (nginx)
#   best CMD...   # "seconds peak_rss_kb max_peak_rss_kb": the best of 3 runs, and the highest
#                 # peak RSS of the 3
work=$(mktemp -d)
proxy_pid=""
cleanup() {
  if [ -n "$proxy_pid" ]; then kill "$proxy_pid" 2>/dev/null || true; fi
  scripts/test-servers.sh stop "$work/state" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

shaped_http_start() {
  WDS_TEST_SERVERS="" scripts/test-servers.sh start "$1" "$work/state" >/dev/null
  # shellcheck disable=SC1091
  source "$work/state/env"
  ${CXX:-c++} -std=c++20 -O2 -pthread -I. bench/shaping_proxy.cpp -o "$work/shaping_proxy"
  "$work/shaping_proxy" "${WDS_TEST_HTTP##*:}" "$2" "$3" >"$work/proxy_port" &
  proxy_pid=$!
  for _ in $(seq 50); do [ -s "$work/proxy_port" ] && break; sleep 0.1; done
  # shellcheck disable=SC2034  # used by the scripts that source this
  proxy_port=$(cat "$work/proxy_port")
}

best() {
  local start end t rss best_t="" best_rss="" max_rss=0
  for _ in 1 2 3; do
    start=$(date +%s%N)
    /usr/bin/time -f %M -o "$work/rss" "$@" >/dev/null 2>&1
    end=$(date +%s%N)
    t=$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.4f", (b - a) / 1e9}')
    rss=$(tail -1 "$work/rss")
    if [ -z "$best_t" ] || awk "BEGIN{exit !($t < $best_t)}"; then best_t=$t best_rss=$rss; fi
    if [ "$rss" -gt "$max_rss" ]; then max_rss=$rss; fi
  done
  echo "$best_t $best_rss $max_rss"
}
