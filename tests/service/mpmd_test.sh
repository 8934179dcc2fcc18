#!/usr/bin/env bash
# One producer and three trainers in one mpirun MPMD job, as a user launches the data service:
#
#   mpirun -np 1 wds serve --exit-when-done ... : -np 3 service_trainer --service ... --epochs 3
#
# Checks: every sample exactly once per epoch across the trainers, the same count on every rank,
# the producer ending by itself when the trainers are done (or mpirun would not return), and a
# rerun with the same seed giving every rank the same samples in the same order. Then one job of
# two producers and two trainers: every sample once per epoch again.
#
#   bash tests/service/mpmd_test.sh build/tools/wds build/examples/service_trainer \
#        build/examples/make_synthetic_shards
#
# (ctest -R service_mpmd runs it so.) Exits 77, a skip, without mpirun.
set -euo pipefail

test_name=mpmd_test
(($# == 3)) || { echo "usage: $0 WDS SERVICE_TRAINER MAKE_SYNTHETIC_SHARDS" >&2; exit 2; }
wds=$1 trainer=$2 make_shards=$3
mpirun=$(command -v mpirun || true)
[[ -n $mpirun ]] || { echo "$test_name: SKIP: no mpirun"; exit 77; }

work=$(mktemp -d)
pids=()
# shellcheck source=tests/service/jobs.sh
source "$(dirname "$0")/jobs.sh"
trap cleanup EXIT
# The trainers' rank must come from mpirun, not from a launcher the caller happens to be under.
unset RANK WORLD_SIZE LOCAL_RANK WDS_SERVICE WDS_SPLIT_POLICY WDS_SEED

readonly world=3 epochs=3 batch=4
# 6 shards of 16: 2 shards, 32 samples, 8 batches per rank and epoch.
"$make_shards" "$work/shards" --shards 6 --samples 16 --size 8 --seed 5 >/dev/null
dataset_keys "$work/shards" >"$work/keys"
readonly per_rank_batches=$(($(wc -l <"$work/keys") / world / batch))

# run_job NAME: the whole job once; the trainers' logs in $work/NAME/log.RANK.
run_job() {
  local name=$1 port rc=0
  port=$(free_port)
  mkdir -p "$work/$name"
  local address=tcp://127.0.0.1:$port
  local cmd=("$mpirun" --allow-run-as-root --oversubscribe
    -np 1 "$wds" serve --exit-when-done --bind "$address" --batch "$batch" --shuffle 20 --seed 3
    "$work/shards/train-{000000..000005}.tar"
    : -np "$world" "$trainer" --service "$address" --epoch "$per_rank_batches" --epochs "$epochs"
    --timeout-ms 10000 --log "$work/$name/log")
  echo "$test_name: ${cmd[*]}"
  # The script's own limit: a job that hangs fails here, well before ctest's.
  timeout -k 5 25 "${cmd[@]}" >"$work/$name/out" 2>&1 &
  pids+=($!)
  wait "${pids[-1]}" || rc=$?
  sed "s/^/$name: /" "$work/$name/out"
  ((rc != 124 && rc != 137)) || fail "$name: the job did not end within 25 s"
  ((rc == 0)) || fail "$name: mpirun exited with $rc"
  grep -q "serving on $address" "$work/$name/out" || fail "$name: the producer never served"
}

run_job first
logs=()
for ((r = 0; r < world; r++)); do logs+=("$work/first/log.$r"); done
check_logs "$work/keys" "$epochs" "$world" "${logs[@]}" || fail "first run: see above"

# set_epoch reached the producer: each epoch's shuffle differs (seeded, so this is the same on
# every run).
cut -f3 "$work/first/log.0" | head -n $((per_rank_batches * batch)) >"$work/epoch0"
grep -P '^1\t' "$work/first/log.0" | cut -f3 >"$work/epoch1"
! cmp -s "$work/epoch0" "$work/epoch1" || fail "rank 0 got epoch 1's samples in epoch 0's order"

run_job rerun
for ((r = 0; r < world; r++)); do
  diff -u "$work/first/log.$r" "$work/rerun/log.$r" >&2 ||
    fail "rank $r got other samples, or another order, on the rerun with the same seed"
done
# Two producers and two trainers in one MPMD job: each producer reads its half of every rank's
# shards (--producer P --producers 2), each trainer merges both; under mpirun the trainers are
# the third app, ranks 0 and 1 among themselves.
# 4 shards of 16: per rank 2 shards, one per producer, 8 batches per epoch.
"$make_shards" "$work/shards4" --shards 4 --samples 16 --size 8 --seed 5 >/dev/null
dataset_keys "$work/shards4" >"$work/keys4"
ports=("$(free_port)" "$(free_port)")
a0=tcp://127.0.0.1:${ports[0]} a1=tcp://127.0.0.1:${ports[1]}
mkdir -p "$work/two"
cmd=("$mpirun" --allow-run-as-root --oversubscribe
  -np 1 "$wds" serve --exit-when-done --bind "$a0" --producer 0 --producers 2 --batch "$batch"
  --shuffle 20 --seed 3 "$work/shards4/train-{000000..000003}.tar"
  : -np 1 "$wds" serve --exit-when-done --bind "$a1" --producer 1 --producers 2 --batch "$batch"
  --shuffle 20 --seed 3 "$work/shards4/train-{000000..000003}.tar"
  : -np 2 "$trainer" --service "$a0,$a1" --epoch 8 --epochs 2
  --timeout-ms 10000 --log "$work/two/log")
echo "$test_name: ${cmd[*]}"
rc=0
timeout -k 5 25 "${cmd[@]}" >"$work/two/out" 2>&1 &
pids+=($!)
wait "${pids[-1]}" || rc=$?
sed "s/^/two: /" "$work/two/out"
((rc == 0)) || fail "two producers: mpirun exited with $rc"
check_logs "$work/keys4" 2 2 "$work/two/log.0" "$work/two/log.1" || fail "two producers: see above"
echo "$test_name: ok"
