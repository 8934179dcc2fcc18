# Helpers for the data service's job tests (mpmd_test.sh, restart_test.sh): sourced, not run.
# They expect `test_name`, `work` (a scratch directory) and the array `pids` (processes to end
# on exit).
# shellcheck shell=bash disable=SC2154

# Fails the test; the output of the processes in $current (a scenario's directory) goes with it.
fail() {
  local f
  if [[ -n ${current:-} ]]; then
    for f in "$current"/*.out; do [[ -f $f ]] && sed "s|^|$(basename "$f"): |" "$f" >&2; done
  fi
  echo "$test_name: FAIL: $*" >&2
  exit 1
}

# Ends what the test started, by pid (mpirun passes SIGTERM on to its processes), and removes the
# scratch directory; for `trap cleanup EXIT`.
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do running "$pid" || break; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$work"
}

# A TCP port on 127.0.0.1 that is free now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Every sample key of the shards in DIR, sorted, one per line (from the tar listings, not from
# wds, so that the check does not trust the code under test).
dataset_keys() {
  local shard
  for shard in "$1"/*.tar; do tar -tf "$shard"; done | sed 's/\..*//' | sort -u
}

# Whether PID (a child of this shell) is still running: not gone, not a zombie waiting for `wait`.
running() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

# Waits up to SECONDS for the command to succeed; fails the test naming WHAT otherwise.
wait_until() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@"; do
    ((SECONDS < deadline)) || fail "waited $seconds s for $what"
    sleep 0.05
  done
}

# The checkpoint's "epoch step" of a service_trainer (empty if none yet).
checkpoint_at() {
  [[ -f $1 ]] || return 0
  head -n 1 "$1" | awk '{print $2, $3}'
}

# check_logs KEYS EPOCHS WORLD LOG...: the logs of one job's trainers ("epoch TAB rank TAB key"
# lines) hold every key of KEYS exactly once per epoch, across the trainers, and every rank the
# same number of samples in every epoch.
check_logs() {
  python3 - "$@" <<'EOF'
import collections, sys
keys_file, epochs, world, logs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
keys = sorted(open(keys_file).read().split())
seen = collections.defaultdict(list)     # epoch -> keys
counts = collections.Counter()           # (epoch, rank) -> samples
for log in logs:
    for n, line in enumerate(open(log), 1):
        fields = line.rstrip("\n").split("\t")
        if len(fields) != 3:
            sys.exit(f"{log}:{n}: not 'epoch TAB rank TAB key': {line!r}")
        epoch, rank, key = int(fields[0]), int(fields[1]), fields[2]
        seen[epoch].append(key)
        counts[epoch, rank] += 1
problems = []
if sorted(seen) != list(range(epochs)):
    problems.append(f"epochs logged: {sorted(seen)}, expected 0..{epochs - 1}")
for epoch in range(epochs):
    got = collections.Counter(seen[epoch])
    twice = sorted(k for k, c in got.items() if c > 1)
    missing = sorted(set(keys) - set(got))
    extra = sorted(set(got) - set(keys))
    for what, ks in (("more than once", twice), ("never", missing), ("not in the dataset", extra)):
        if ks:
            problems.append(f"epoch {epoch}: {len(ks)} samples {what}: {' '.join(ks[:8])}")
    per_rank = [counts[epoch, r] for r in range(world)]
    if len(set(per_rank)) != 1 or sum(per_rank) != sum(got.values()):
        problems.append(f"epoch {epoch}: samples per rank {per_rank}, not equal")
if problems:
    sys.exit("\n".join(problems))
print(f"{len(logs)} logs: {len(keys)} samples exactly once in each of {epochs} epochs, "
      f"{len(keys) // world} per rank")
EOF
}
