#!/usr/bin/env bash
# Two builds of `wds` side by side on photo-shaped shards as users read them (shuffle 1000, 2
# workers; raw, and decoded to 224x224 batches of 64), with `cat` (the ceiling) and Python
# webdataset (the peer) in the same run: wall time and peak RSS per run, REPS rounds.
#   bench/base_ab.sh BASE_WDS NEW_WDS 'DIR/train-*.tar' [REPS] [WEBDATASET_SRC]
set -euo pipefail
base=$1 new=$2 pattern=$3 reps=${4:-5} wsrc=${5:-}
t() { /usr/bin/time -f "%e s %M KB" "$@" 2>&1 >/dev/null | tail -1; }
# shellcheck disable=SC2086
for _ in $(seq "$reps"); do
  echo "cat | $(t cat $pattern)"
  for which in base new; do
    bin=$base; [ "$which" = new ] && bin=$new
    echo "$which raw | $(t "$bin" bench --shuffle 1000 --workers 2 $pattern)"
    echo "$which decode | $(t "$bin" bench --shuffle 1000 --workers 2 --decode rgb8 --resize 256 \
      --crop 224 --tuple 'jpg cls' --batch 64 $pattern)"
  done
  [ -n "$wsrc" ] && echo "webdataset raw | $(t env PYTHONPATH="$wsrc" /usr/bin/python3 -c "
import glob, webdataset as wds
sum(1 for _ in wds.WebDataset(sorted(glob.glob('$pattern')), shardshuffle=False).shuffle(1000))")"
done
