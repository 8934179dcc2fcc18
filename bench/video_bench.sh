#!/usr/bin/env bash
# Video clips as a video-text job reads them (issue 28): 16 frames at 224x224 from 10-30 s 480p
# H.264 clips, batch 8, 2 workers, through `wds bench`; the same frames decoded by `ffmpeg` (one
# thread per process, two processes at a time: the ceiling on the same cores); Python webdataset
# with its torch_video handler (the peer, DataLoader with 2 workers). Wall time and peak RSS.
#   bench/video_bench.sh WDS DIR [ROUNDS] [WEBDATASET_SRC]
# DIR gets the clips (made once with ffmpeg: testsrc2 with temporal noise, so that the bit rate is
# a camera's, not a test pattern's) and two shards of them.
set -euo pipefail
wds=$1 dir=$2 rounds=${3:-3} wsrc=${4:-}
clips=32 offset=4
mkdir -p "$dir/clips"
if [ ! -f "$dir/done" ]; then
  : >"$dir/list.txt"
  for i in $(seq 0 $((clips - 1))); do
    secs=$((10 + (i % 5) * 5))  # 10, 15, 20, 25, 30 s
    f=$(printf '%s/clips/c%03d.mp4' "$dir" "$i")
    nice ffmpeg -nostdin -loglevel error -y -f lavfi \
      -i "testsrc2=size=854x480:rate=30,noise=alls=12:allf=t+u:all_seed=$i" -t "$secs" \
      -c:v libx264 -preset veryfast -crf 23 -g 90 -pix_fmt yuv420p "$f"
    printf '%s\t%d\n' "$f" "$((i % 10))" >>"$dir/list.txt"
  done
  "$wds" create "$dir/shard-%02d.tar" --from-list "$dir/list.txt" --maxcount 16 >/dev/null
  touch "$dir/done"
fi
shards=("$dir/shard-00.tar" "$dir/shard-01.tar")
t() { /usr/bin/time -f "%e s %M KB, CPU %U + %S s" "$@" 2>&1 >/dev/null | tail -1; }
common=(--workers 2 --batch 8 --tuple 'mp4 cls' --decode-video --video-frames 16 --video-size 224)
for _ in $(seq "$rounds"); do
  echo "cat | $(t cat "${shards[@]}")"
  echo "wds read only | $(t "$wds" bench --workers 2 "${shards[@]}")"
  echo "wds clips at ${offset} s | $(t "$wds" bench "${common[@]}" --video-offset $offset "${shards[@]}")"
  echo "wds clips, random start | $(t "$wds" bench "${common[@]}" --video-random "${shards[@]}")"
  # The same 16 frames of each clip (the first at or after 4 s), scaled the same way.
  echo "ffmpeg, 2 at a time | $(t sh -c "ls $dir/clips/*.mp4 | xargs -P 2 -I F ffmpeg -nostdin \
    -loglevel error -threads 1 -ss $offset -i F -frames:v 16 -filter_threads 1 \
    -vf scale=224:224:flags=bilinear -f rawvideo -pix_fmt rgb24 -y /dev/null")"
  # Its start-up alone (open, probe, the first frame), to subtract.
  echo "ffmpeg start-up only | $(t sh -c "ls $dir/clips/*.mp4 | xargs -P 2 -I F ffmpeg \
    -nostdin -loglevel error -threads 1 -i F -frames:v 1 -filter_threads 1 \
    -vf scale=224:224:flags=bilinear -f rawvideo -pix_fmt rgb24 -y /dev/null")"
  [ -n "$wsrc" ] && echo "webdataset torch_video | $(t env PYTHONPATH="$wsrc" /usr/bin/python3 -c "
import torch, webdataset as wds
import torch.nn.functional as F
def clip(sample):
    (video, _, info), cls = sample   # torchvision.io.read_video: the whole video, [N, H, W, 3]
    frames = video[int($offset * info['video_fps']):][:16].permute(0, 3, 1, 2).float()
    return F.interpolate(frames, size=(224, 224), mode='bilinear').to(torch.uint8), cls
ds = wds.WebDataset('$dir/shard-{00..01}.tar', shardshuffle=False).decode(wds.torch_video) \
    .to_tuple('mp4', 'cls').map(clip).batched(8)
n = sum(len(b[0]) for b in torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2))
assert n == $clips, n")"
done
