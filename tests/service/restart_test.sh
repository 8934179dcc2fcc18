#!/usr/bin/env bash
# Restarts in a data-service job (one `wds serve`, three service_trainer processes, 3 epochs),
# launched by hand with RANK/WORLD_SIZE so that single processes can be killed:
#   a. a trainer SIGKILLed mid-epoch, after a checkpoint, and restarted with --restore;
#   b. the producer SIGKILLed: the trainers fail within their --timeout-ms with "no answer from
#      the producer"; the producer restarted with --restore of its --state-file, the trainers with
#      --restore of their checkpoints;
#   c. the producer SIGKILLed and restarted at once while the trainers keep running.
# Each must end with every sample exactly once per epoch across the trainers, equal counts.
#
#   bash tests/service/restart_test.sh build/tools/wds build/examples/service_trainer \
#        build/examples/make_synthetic_shards [a|b|c]...
#
# (ctest -R service_restart runs it so, all three.)
set -euo pipefail

test_name=restart_test
(($# >= 3)) || { echo "usage: $0 WDS SERVICE_TRAINER MAKE_SYNTHETIC_SHARDS [a|b|c]..." >&2; exit 2; }
wds=$1 trainer=$2 make_shards=$3
shift 3
scenarios=("$@")
((${#scenarios[@]})) || scenarios=(a b c)

work=$(mktemp -d)
pids=() trainer_pid=() producer='' current=''

# shellcheck source=tests/service/jobs.sh
source "$(dirname "$0")/jobs.sh"
trap cleanup EXIT
# Each trainer's rank is the RANK given here, not one from a launcher the caller is under.
unset WDS_SERVICE WDS_SPLIT_POLICY WDS_SEED OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE \
  OMPI_MCA_orte_app_num OMPI_APP_CTX_NUM_PROCS

readonly world=3 epochs=3 batch=4
"$make_shards" "$work/shards" --shards 6 --samples 16 --size 8 --seed 5 >/dev/null
dataset_keys "$work/shards" >"$work/keys"
readonly per_rank_batches=$(($(wc -l <"$work/keys") / world / batch))
readonly shards="$work/shards/train-{000000..000005}.tar"

# start_producer DIR ADDRESS [ARGS...]: wds serve in the background (pid in $producer), once it
# is bound.
start_producer() {
  local dir=$1 address=$2
  shift 2
  "$wds" serve --exit-when-done --bind "$address" --batch "$batch" --shuffle 20 --seed 3 "$@" \
    "$shards" >>"$dir/producer.out" 2>&1 &
  producer=$!
  pids+=("$producer")
  wait_until 10 "the producer to serve on $address" grep -qs "serving on $address" "$dir/producer.out"
}

# start_trainer DIR RANK ADDRESS [ARGS...]: service_trainer of rank RANK in the background (pid in
# trainer_pid[RANK]), logging to DIR/log.RANK and checkpointing to DIR/ckpt.RANK every batch.
start_trainer() {
  local dir=$1 rank=$2 address=$3
  shift 3
  RANK=$rank WORLD_SIZE=$world "$trainer" --service "$address" --epoch "$per_rank_batches" \
    --epochs "$epochs" --log "$dir/log" --save-state "$dir/ckpt" --save-every 1 "$@" \
    >>"$dir/trainer.$rank.out" 2>&1 &
  trainer_pid[rank]=$!
  pids+=("${trainer_pid[rank]}")
}

# expect_exit PID CODE WHAT: waits (up to 20 s) for PID to end with CODE.
expect_exit() {
  local pid=$1 code=$2 what=$3 rc=0
  wait_until 20 "$what to end" eval "! running $pid"
  wait "$pid" || rc=$?
  ((rc == code)) || fail "$what exited with $rc, expected $code"
}

# finish DIR: every trainer and the producer (--exit-when-done) end well; the logs are exact and,
# but for a reference run, the same as the reference run's, line for line: a restart changes
# nothing in what a rank trains on, nor in the order.
finish() {
  local dir=$1 r
  for ((r = 0; r < world; r++)); do expect_exit "${trainer_pid[r]}" 0 "trainer $r"; done
  expect_exit "$producer" 0 "the producer"
  check_logs "$work/keys" "$epochs" "$world" "$dir"/log.{0..2} || fail "the logs are not exact"
  [[ $dir != "$work/reference" ]] || return 0
  for ((r = 0; r < world; r++)); do
    diff -u "$work/reference/log.$r" "$dir/log.$r" >&2 ||
      fail "rank $r trained on other samples, or in another order, than without the restart"
  done
}

# mid_job FILE [inside]: whether the trainer checkpointing to FILE is past epoch 0 but not done;
# with "inside", also not at the end of an epoch.
mid_job() {
  local at epoch step
  at=$(checkpoint_at "$1")
  [[ -n $at ]] || return 1
  read -r epoch step <<<"$at"
  ((epoch >= 1 && epoch * per_rank_batches + step < epochs * per_rank_batches)) || return 1
  [[ ${2:-} != inside ]] || ((step < per_rank_batches))
}

# Whether every trainer in DIR is mid_job (they run at one pace: a window of about two epochs).
all_mid_job() {
  local r
  for ((r = 0; r < world; r++)); do mid_job "$1/ckpt.$r" || return 1; done
}

# The job without a restart, for the others to compare with.
reference() {
  local dir=$work/reference address r
  mkdir -p "$dir"
  current=$dir
  address=tcp://127.0.0.1:$(free_port)
  start_producer "$dir" "$address"
  for ((r = 0; r < world; r++)); do start_trainer "$dir" "$r" "$address"; done
  finish "$dir"
}

# a. Rank 1 trains slowly; once it has a checkpoint in the middle of epoch 1 and has logged
# samples after it (which the restore must take back), it is killed and started again.
scenario_a() {
  local dir=$work/a address
  mkdir -p "$dir"
  current=$dir
  address=tcp://127.0.0.1:$(free_port)
  start_producer "$dir" "$address"
  start_trainer "$dir" 0 "$address"
  start_trainer "$dir" 1 "$address" --sleep-ms 40
  start_trainer "$dir" 2 "$address"
  wait_until 20 "rank 1 to checkpoint inside epoch 1 or 2" mid_job "$dir/ckpt.1" inside
  local saved
  saved=$(head -n 1 "$dir/ckpt.1" | awk '{print $4}')
  wait_until 5 "rank 1 to log past its checkpoint" \
    bash -c "(( \$(stat -c %s '$dir/log.1') > $saved ))"
  kill -KILL "${trainer_pid[1]}"
  wait "${trainer_pid[1]}" 2>/dev/null || true
  echo "$test_name: a: rank 1 killed at checkpoint '$(checkpoint_at "$dir/ckpt.1")'," \
    "$(wc -l <"$dir/log.1") samples logged"
  start_trainer "$dir" 1 "$address" --restore "$dir/ckpt"
  finish "$dir"
  grep -q "restored" "$dir/trainer.1.out" || fail "a: rank 1 did not say it restored"
}

# kill_producer_mid_job NAME ADDRESS TIMEOUT_MS: in $work/NAME, a producer (state file, saved
# every batch) and slow trainers with that timeout; once every trainer has checkpointed inside
# the job, the producer is SIGKILLed.
kill_producer_mid_job() {
  local name=$1 address=$2 timeout_ms=$3 dir=$work/$1 r
  mkdir -p "$dir"
  current=$dir
  start_producer "$dir" "$address" --state-file "$dir/producer.state" --save-every 1
  for ((r = 0; r < world; r++)); do
    start_trainer "$dir" "$r" "$address" --sleep-ms 50 --timeout-ms "$timeout_ms"
  done
  wait_until 20 "the trainers to checkpoint in epoch 1 or 2" all_mid_job "$dir"
  echo "$test_name: $name: the producer killed, trainers at checkpoints" \
    "$(for ((r = 0; r < world; r++)); do printf "'%s' " "$(checkpoint_at "$dir/ckpt.$r")"; done)"
  kill -KILL "$producer"
  wait "$producer" 2>/dev/null || true
}

# b. The producer is killed mid-epoch; the trainers must give up within their timeout with a
# clear message; then everything is restarted from its saved state.
scenario_b() {
  local dir=$work/b address r
  address=tcp://127.0.0.1:$(free_port)
  kill_producer_mid_job b "$address" 1500
  for ((r = 0; r < world; r++)); do
    expect_exit "${trainer_pid[r]}" 1 "trainer $r (its producer gone)"
  done
  for ((r = 0; r < world; r++)); do
    grep -q "no answer from the producer" "$dir/trainer.$r.out" ||
      fail "b: trainer $r failed without 'no answer from the producer'"
  done
  [[ -s $dir/producer.state ]] || fail "b: the producer wrote no --state-file"
  start_producer "$dir" "$address" --state-file "$dir/producer.state" --save-every 1 \
    --restore "$dir/producer.state"
  for ((r = 0; r < world; r++)); do
    start_trainer "$dir" "$r" "$address" --timeout-ms 10000 --restore "$dir/ckpt"
  done
  finish "$dir"
}

# c. The producer is killed and restarted at once; the trainers (timeout 10 s) wait for it and go
# on where they were.
scenario_c() {
  local dir=$work/c address
  address=tcp://127.0.0.1:$(free_port)
  kill_producer_mid_job c "$address" 10000
  start_producer "$dir" "$address" --state-file "$dir/producer.state" --save-every 1 \
    --restore "$dir/producer.state"
  finish "$dir"
}

reference
for s in "${scenarios[@]}"; do
  echo "$test_name: scenario $s"
  "scenario_$s"
done
echo "$test_name: ok"
