#!/usr/bin/python3
"""webdataset's API as its users run it, on wdscpp and on webdataset, beside `wds bench`.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_api_bench.py --tool build/tools/wds \
        --webdataset-src WEBDATASET/src CASE SHARD_PATTERN

One process per run, in turn, on the same shards and cores; each run's peak memory is that of
its whole process tree (the DataLoader's workers included), sampled every 50 ms from /proc:
the sum of the processes' RSS (pages shared after fork counted once per process) and of their
PSS (shared pages split between them); and /usr/bin/time -f %M, the largest single process's.

Cases (issue 25's figures), each through wds.WebLoader(ds, batch_size=None, num_workers=W), as
webdataset documents it (wdscpp: W threads of its Loader when the pipeline runs whole in C++,
else torch's DataLoader), and again through torch.utils.data.DataLoader itself (W worker
processes, each batch copied into shared memory), shards split between the workers by
webdataset's split_by_worker:
  train      WebDataset(shardshuffle=100).shuffle(1000).decode("rgb8").to_tuple("jpg", "cls")
             .batched(64): `import wdscpp as wds` against `wds bench` with the same stages on
             W threads (the ceiling), and webdataset itself. Needs images of one size.
  resize     the same on images of many sizes, each made 224x224 uint8 (shorter side 256, then
             the centre): wdscpp's decode("rgb8", resize=256, crop=224), `wds bench --resize 256
             --crop 224`, and webdataset with decode("pil") and torchvision's Resize(256),
             CenterCrop(224) in map_tuple.
  transform  the training transform (RandomResizedCrop(224), flip, ImageNet normalisation, CHW
             float32), batched 64: wdscpp's decode("rgb8", random_resized_crop=224, ...) against
             webdataset + torchvision (decode("pil"), map_tuple(Compose([...]))), and
             `wds bench` with the same transform.
  raw        the samples as they are (no decode), one at a time: wdscpp against webdataset.
"""

import argparse
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


# --- the child: one run, as a user writes it ---


def child(impl, case, shards, workers, limit):
    if impl == "webdataset":
        import webdataset as wds
    else:
        import wdscpp as wds
    import torch

    if case == "train":
        ds = (wds.WebDataset(shards, shardshuffle=100).shuffle(1000).decode("rgb8")
              .to_tuple("jpg", "cls").batched(64))
    elif case == "resize" and impl != "webdataset":
        ds = (wds.WebDataset(shards, shardshuffle=100).shuffle(1000)
              .decode("rgb8", resize=256, crop=224).to_tuple("jpg", "cls").batched(64))
    elif case == "resize":
        import numpy as np
        from torchvision import transforms as T

        t = T.Compose([T.Resize(256), T.CenterCrop(224), np.asarray])
        ds = (wds.WebDataset(shards, shardshuffle=100).shuffle(1000).decode("pil")
              .to_tuple("jpg", "cls").map_tuple(t, lambda x: x).batched(64))
    elif case == "transform" and impl != "webdataset":
        ds = (wds.WebDataset(shards, shardshuffle=100).shuffle(1000)
              .decode("rgb8", random_resized_crop=224, flip=0.5, normalize="imagenet",
                      layout="chw", dtype="float32")
              .to_tuple("jpg", "cls").batched(64))
    elif case == "transform":
        from torchvision import transforms as T

        t = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                       T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
        ds = (wds.WebDataset(shards, shardshuffle=100).shuffle(1000).decode("pil")
              .to_tuple("jpg", "cls").map_tuple(t, lambda x: x).batched(64))
    else:
        ds = wds.WebDataset(shards, shardshuffle=False)
    if impl == "wdscpp-dataloader":  # torch's worker processes, whatever the pipeline
        loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    else:
        loader = wds.WebLoader(ds, batch_size=None, num_workers=workers)
    samples = 0
    start = time.perf_counter()
    for item in loader:
        samples += len(item[1]) if case != "raw" else 1
        if limit and samples >= limit:
            break
    seconds = time.perf_counter() - start
    print(json.dumps({"samples": samples, "seconds": seconds}), flush=True)


# --- the parent: runs and their memory ---


def tree_memory(root):
    """(sum of RSS, sum of PSS) in MB over root and its descendants."""
    children = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(pid))
    rss = pss = 0
    todo = [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Rss:"):
                        rss += int(line.split()[1])
                    elif line.startswith("Pss:"):
                        pss += int(line.split()[1])
        except OSError:
            pass
    return rss / 1024, pss / 1024


def run(cmd, env):
    """(the run's JSON line, [tree RSS, tree PSS, /usr/bin/time's %M] peaks in MB)."""
    cmd = ["/usr/bin/time", "-f", "time-max-rss-kb %M", *cmd]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    peak = [0.0, 0.0, 0.0]

    def watch():
        while proc.poll() is None:
            rss, pss = tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    out, err = proc.communicate()
    watcher.join()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit status {proc.returncode}\n{err}")
    # %M: the largest single process's peak (the workers are separate processes).
    peak[2] = int(err.strip().splitlines()[-1].split()[-1]) / 1024
    result = json.loads(out.strip().splitlines()[-1])
    return result, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", nargs=2, metavar=("IMPL", "CASE"), help=argparse.SUPPRESS)
    ap.add_argument("--tool", default="build/tools/wds", help="the wds binary")
    ap.add_argument("--webdataset-src", help="webdataset's source (the directory holding the "
                    "webdataset/ package); without it the peer is left out")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--limit", type=int, default=0, help="stop after N samples (0: one pass)")
    ap.add_argument("--runs", type=int, default=1, help="runs of each, interleaved")
    ap.add_argument("case", nargs="?", choices=["train", "resize", "transform", "raw"])
    ap.add_argument("shards", help="a shard pattern with jpg and cls fields")
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1], a.shards, a.workers, a.limit)

    env = dict(os.environ)
    runs = []
    if a.case in ("train", "resize", "transform"):
        args = ["--workers", str(a.workers), "--shuffle", "1000", "--shard-shuffle", "100",
                "--tuple", "jpg cls", "--batch", "64", "--decode", "rgb8"]
        if a.case == "resize":
            args += ["--resize", "256", "--crop", "224"]
        if a.case == "transform":
            args += ["--random-resized-crop", "224", "--flip", "0.5", "--normalize", "imagenet",
                     "--layout", "chw", "--dtype", "float32"]
        runs.append(("wds bench (C++ threads)", [a.tool, "bench", a.shards, "--json", *args], env))
    me = [sys.executable, os.path.abspath(__file__), "--workers", str(a.workers),
          "--limit", str(a.limit)]
    runs.append(("wdscpp, webdataset's API", me + ["--child", "wdscpp", a.case, a.shards], env))
    runs.append(("wdscpp, torch DataLoader processes",
                 me + ["--child", "wdscpp-dataloader", a.case, a.shards], env))
    if a.webdataset_src:
        peer_env = dict(env, PYTHONPATH=os.path.abspath(a.webdataset_src))
        name = "webdataset" + (" + torchvision" if a.case == "transform" else "")
        runs.append((name, me + ["--child", "webdataset", a.case, a.shards], peer_env))

    results = {}
    for _ in range(a.runs):
        for name, cmd, e in runs:
            r, peak = run(cmd, e)
            samples = r.get("samples", 0)
            seconds = r.get("seconds", r.get("wall_s"))
            results.setdefault(name, []).append((samples / seconds, samples, peak))
    base = max(x[0] for x in results["wdscpp, webdataset's API"])
    print(f"case {a.case}, {a.workers} workers, {a.shards}")
    for name, rs in results.items():
        speeds = " / ".join(f"{s:,.0f}" for s, _, _ in rs)
        rss = max(p[0] for _, _, p in rs)
        pss = max(p[1] for _, _, p in rs)
        largest = max(p[2] for _, _, p in rs)
        ratio = base / max(s for s, _, _ in rs)
        print(f"  {name:34s} {speeds:>22s} samples/s ({rs[0][1]} samples), peak tree RSS "
              f"{rss:,.0f} MB, PSS {pss:,.0f} MB, time %M {largest:,.0f} MB; "
              f"wdscpp / this {ratio:.2f}")


if __name__ == "__main__":
    main()
