#!/bin/bash
# Checkpoints examples/elastic_train on 4 ranks x 2 workers after K steps and resumes it on
# 2 x 1, 3 x 2 and 8 x 1, over shards of different sizes with shuffling on; checks that what was
# taken before plus after is, sample for sample, what an uninterrupted 4 x 2 run takes over as
# many samples (nothing read twice, nothing skipped), and that a rank started with another seed
# stops the job.
#   elastic_test.sh MPIEXEC ELASTIC_TRAIN MAKE_SHARDS
set -euo pipefail
mpiexec=$1 train=$2 make_shards=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
"$make_shards" . 24 3-10
pattern='train-{000000..000023}.tar'
common=(--shards "$pattern" --streams 24 --shuffle 5 --seed 3 --epoch 40)
run() {  # run NP ARGS...
  local np=$1
  shift
  timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$train" "${common[@]}" "$@"
}
fail() {
  echo "elastic_test: $*" >&2
  exit 1
}

run 4 --workers 2 --steps 10 --save ckpt.state --keys before.txt
[ "$(wc -l < before.txt)" -eq 40 ] || fail "the first part took $(wc -l < before.txt) samples, not 40"
# NP WORKERS STEPS: 40 + NP * STEPS samples in all, a whole number of 4 x 2 steps.
for case in "2 1 20" "3 2 8" "8 1 5"; do
  read -r np workers steps <<< "$case"
  run "$np" --workers "$workers" --steps "$steps" --restore ckpt.state --keys "after-$np.txt"
  total=$((40 + np * steps))
  run 4 --workers 2 --steps $((total / 4)) --keys "straight-$np.txt"
  sort before.txt "after-$np.txt" > got.txt
  sort "straight-$np.txt" > want.txt
  if ! cmp -s got.txt want.txt; then
    diff got.txt want.txt | head -20 >&2
    fail "resumed on $np x $workers: before + after differs from the uninterrupted run"
  fi
  # 156 samples in an epoch: below that, none may come twice.
  dups=$(uniq -d got.txt | wc -l)
  allowed=$((total > 156 ? total - 156 : 0))
  [ "$dups" -le "$allowed" ] || fail "resumed on $np x $workers: $dups samples twice"
  echo "elastic_test: 4 x 2 -> $np x $workers: $total samples, as uninterrupted"
done

# A rank with another seed: the fingerprints differ and the job stops before reading.
if "$mpiexec" --allow-run-as-root --oversubscribe -np 1 "$train" "${common[@]}" --steps 1 \
     : -np 1 "$train" --shards "$pattern" --streams 24 --shuffle 5 --seed 4 --epoch 40 --steps 1 \
     > mismatch.log 2>&1; then
  fail "ranks with different seeds were not stopped"
fi
grep -q "fingerprints differ" mismatch.log || { cat mismatch.log >&2; fail "no fingerprint message"; }
echo "elastic_test: a rank with another seed stops the job"
