#!/usr/bin/env bash
# Runs examples/ddp_train under mpirun on shards made for the run, and checks how it ended.
#
#   ddp_test.sh --mpiexec MPIRUN --ddp-train BIN --make-shards BIN --np RANKS \
#               --shards COUNT --samples PER_SHARD [--expect-fail TEXT] [--expect-stderr TEXT]... \
#               [--rank-env NAME=VALUE]... [--broken-shard K] -- DDP_TRAIN_ARGS...
#
# ddp_train gets --shards (the made shards) and --report, then DDP_TRAIN_ARGS. By default it must
# succeed, print one summary line per epoch and report every epoch ok. With --expect-fail it must
# fail (exit non-zero, not by the timeout) with TEXT on stderr. --expect-stderr TEXT: stderr must
# contain TEXT as well. --rank-env sets a variable in each rank's environment, VALUE expanded by
# that rank's shell ('WDS_SEED=$OMPI_COMM_WORLD_RANK': a different seed on every rank), to break
# the job on purpose, as does --broken-shard (shard K is truncated). A hang (a rank left waiting on another) ends in the timeout and fails.
set -euo pipefail

fail() {
  echo "ddp_test: FAIL: $*" >&2
  exit 1
}

mpiexec='' ddp_train='' make_shards='' np='' nshards='' samples='' expect_fail='' broken=()
expect_stderr=() rank_env=()
while (($#)); do
  case "$1" in
    --mpiexec) mpiexec=$2 ;;
    --ddp-train) ddp_train=$2 ;;
    --make-shards) make_shards=$2 ;;
    --np) np=$2 ;;
    --shards) nshards=$2 ;;
    --samples) samples=$2 ;;
    --expect-fail) expect_fail=$2 ;;
    --expect-stderr) expect_stderr+=("$2") ;;
    --rank-env) rank_env+=("$2") ;;
    --broken-shard) broken=("$2") ;;
    --) shift; break ;;
    *) echo "ddp_test: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
for var in mpiexec ddp_train make_shards np nshards samples; do
  [[ -n ${!var} ]] || { echo "ddp_test: --${var//_/-} is required" >&2; exit 2; }
done

# The epochs ddp_train is asked for: one summary line and one report line each.
epochs=1
args=("$@")
for ((i = 0; i < ${#args[@]} - 1; i++)); do
  if [[ ${args[i]} == --epochs ]]; then epochs=${args[i + 1]}; fi
done

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$make_shards" "$dir" "$nshards" "$samples" "${broken[@]}"
pattern="$dir/train-{000000..$(printf '%06d' $((nshards - 1)))}.tar"

# The test's outcome must not depend on the caller's environment: a torchrun rank would
# override Open MPI's (ddp_train would rightly refuse it), a policy would replace the default.
unset RANK WORLD_SIZE LOCAL_RANK WDS_SPLIT_POLICY WDS_SEED

program=("$ddp_train")
if ((${#rank_env[@]})); then
  program=(sh -c "export ${rank_env[*]}; exec \"\$0\" \"\$@\"" "$ddp_train")
fi
cmd=("$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "${program[@]}" --shards "$pattern"
     --report "$dir/report" "$@")
echo "ddp_test: ${cmd[*]}"
rc=0
timeout -k 10 120 "${cmd[@]}" >"$dir/out" 2>"$dir/err" || rc=$?
cat "$dir/out"
sed 's/^/stderr: /' "$dir/err"
echo "ddp_test: exit code $rc"

((rc != 124 && rc != 137)) || fail "timed out after 120 s: a rank is hanging"
for text in "${expect_stderr[@]}"; do
  grep -qF -- "$text" "$dir/err" || fail "stderr lacks '$text'"
done

if [[ -n $expect_fail ]]; then
  ((rc != 0)) || fail "ddp_train succeeded, but was expected to fail"
  grep -qF -- "$expect_fail" "$dir/err" || fail "stderr lacks '$expect_fail'"
  echo "ddp_test: PASS (failed as expected)"
  exit 0
fi

((rc == 0)) || fail "ddp_train exited with $rc"
summaries=$(grep -c '^epoch [0-9]*: ' "$dir/out" || true)
((summaries == epochs)) || fail "$summaries epoch summaries on stdout, expected $epochs"
[[ -f $dir/report ]] || fail "no report written"
reported=$(grep -c ' ok=1$' "$dir/report" || true)
((reported == epochs)) || fail "$reported epochs reported ok, expected $epochs"
echo "ddp_test: PASS"
