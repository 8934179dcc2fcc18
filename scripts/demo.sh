#!/usr/bin/env bash
# Installs what is missing, builds, makes a small synthetic dataset (JPEG + class + JSON per
# sample, 8 shards), streams it, then runs the full reading pipeline (shard shuffle, rank split,
# sample shuffle, fixed-length epochs, decoding and batching on worker threads), a training
# loop, a 2-rank data-parallel job under mpirun, and the data service: one producer decoding and
# batching for 2 trainers under mpirun.
#   WDS_DEMO_DIR=/path scripts/demo.sh   # where the dataset goes (default: demo-data/)
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target wds_tool make_synthetic_shards stream_shards ddp_train \
  train_loop service_trainer

data=${WDS_DEMO_DIR:-demo-data}
shards="$data/train-{000000..000007}.tar"
echo "== make the dataset =="
build/examples/make_synthetic_shards "$data" --shards 8 --samples 250 --size 256
echo "== the first samples: wds ls --json =="
build/tools/wds ls --json "$data/train-000000.tar" >"$data/train-000000.jsonl"
head -n 3 "$data/train-000000.jsonl"
echo "== stream all shards (one process) =="
build/examples/stream_shards "$shards"
echo "== stream as the two ranks of a 2-node job (each reads its own shards) =="
for rank in 0 1; do
  build/examples/stream_shards "$shards" "$rank" 2
done
echo "== the pipeline: shard shuffle, sample shuffle, 1000 samples per epoch, 3 epochs =="
build/tools/wds bench "$shards" --shuffle-shards --shuffle 500 --seed 1 --epoch 1000 --passes 3
echo "== the full pipeline on 2 worker threads: split, shuffle, decode to RGB, batches of 64,"
echo "   with what each stage did (I/O, decode time, who waited on whom, recycled batch buffers) =="
build/tools/wds bench "$shards" --shuffle-shards --shuffle 500 --decode rgb8 --tuple 'jpg cls' \
  --batch 64 --workers 2 --stats
echo "== the same as one JSON line, for scripts =="
build/tools/wds bench "$shards" --decode rgb8 --tuple 'jpg cls' --batch 64 --workers 2 --json
echo "== a training loop: resampled shards, 20 batches per epoch, batches handed over as DLPack =="
build/examples/train_loop "$shards" 2 32 2
echo "== a 2-rank data-parallel job under mpirun, checked with MPI collectives =="
mpirun --allow-run-as-root --oversubscribe -np 2 \
  build/examples/ddp_train --shards "$shards" --epochs 2 --batch 32 --shuffle 500
echo "== the data service: 1 producer decodes and batches, 2 trainers only take batches (mpirun MPMD) =="
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mpirun --allow-run-as-root --oversubscribe \
  -np 1 build/tools/wds serve --exit-when-done --bind "tcp://127.0.0.1:$port" --shuffle-shards \
    --shuffle 500 --decode rgb8 --tuple 'jpg cls' --batch 32 "$shards" : \
  -np 2 build/examples/service_trainer --service "tcp://127.0.0.1:$port" --epoch 20 --epochs 2
