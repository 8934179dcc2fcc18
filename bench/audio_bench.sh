#!/usr/bin/env bash
# 10 s audio windows as a speech job reads them (issue 28): a window at 30 s of each of six
# clips (1, 3 and 5 min, stereo 44.1 kHz, each as FLAC and as MP3 192 kb/s), 5 passes, one thread
# (`wds bench --workers 0`); `ffmpeg` decoding the same windows, one process per pass with the
# six clips as its inputs (one decoder thread each, as wds), and its start-up, probe and seek alone (`-t 0.001`), to subtract. Wall time, peak RSS, CPU time.
#   bench/audio_bench.sh WDS DIR [ROUNDS]
set -euo pipefail
wds=$1 dir=$2 rounds=${3:-3}
mkdir -p "$dir/clips"
if [ ! -f "$dir/done" ]; then
  : >"$dir/list.txt"
  for mins in 1 3 5; do
    src="aevalsrc=0.4*sin(2*PI*(220+${mins}*40)*t)+0.2*sin(2*PI*1375*t)|0.3*sin(2*PI*330*t):s=44100"
    for codec in flac mp3; do
      f="$dir/clips/tone-${mins}min.$codec"
      args=(-c:a flac)
      [ "$codec" = mp3 ] && args=(-c:a libmp3lame -b:a 192k)
      nice ffmpeg -nostdin -loglevel error -y -f lavfi -i "$src" -t $((mins * 60)) "${args[@]}" "$f"
      printf '%s\t0\n' "$f" >>"$dir/list.txt"
    done
  done
  "$wds" create "$dir/audio-%02d.tar" --from-list "$dir/list.txt" >/dev/null
  touch "$dir/done"
fi
t() { /usr/bin/time -f "%e s %M KB, CPU %U + %S s" "$@" 2>&1 >/dev/null | tail -1; }
windows() {  # 5 ffmpeg processes, each the window of every clip (start-up paid once per pass)
  local inputs=() outputs=() i=0
  for f in "$dir"/clips/*; do
    inputs+=(-threads 1 -ss 30 -t "$1" -i "$f")
    outputs+=(-map "$i:a" -f f32le -y /dev/null)
    i=$((i + 1))
  done
  for _ in 1 2 3 4 5; do
    ffmpeg -nostdin -loglevel error "${inputs[@]}" "${outputs[@]}"
  done
}
for _ in $(seq "$rounds"); do
  echo "wds read only | $(t "$wds" bench --workers 0 --passes 5 "$dir/audio-00.tar")"
  echo "wds windows | $(t "$wds" bench --workers 0 --passes 5 --decode-audio --audio-offset 30 \
    --audio-duration 10 "$dir/audio-00.tar")"
  echo "ffmpeg windows | $(t bash -c "$(declare -f windows); dir='$dir'; windows 10")"
  echo "ffmpeg start-up, probe and seek | $(t bash -c "$(declare -f windows); dir='$dir'; windows 0.001")"
done
