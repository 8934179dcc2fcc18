#!/usr/bin/python3
"""The Python peer of the in-decoder ImageNet transforms (issue 23): webdataset + torchvision.

    WEBDATASET_SRC=/tmp/webdataset-src /usr/bin/python3 bench/torchvision_peer.py \
        --mode train|eval [--workers 2] [--batch 64] [--shuffle 1000] [--epochs 1] [--limit N]
        [--rss] SHARD...

What users run today, written the way webdataset documents it (its train-resnet50-wds example):

    train: WebDataset(shards, shardshuffle=100).shuffle(1000).decode("pil")
               .to_tuple("jpg", "cls").map_tuple(T, identity).batched(64)
           T = Compose([RandomResizedCrop(224), RandomHorizontalFlip(), ToTensor(),
                        Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])])
    eval:  WebDataset(shards, shardshuffle=False).decode("pil").to_tuple("jpg", "cls")
               .map_tuple(T, identity).batched(64)
           T = Compose([Resize(256), CenterCrop(224), ToTensor(), Normalize(...)])
    torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)

Batching happens in the dataset (inside each worker), as webdataset documents for an
IterableDataset; the DataLoader only moves finished batches. shardshuffle=100 is what
shardshuffle=True means in webdataset 0.2.x (True only adds a deprecation warning); with fewer
than 100 shards it is a full shuffle of each worker's shards. Shards are split between workers
by webdataset's default split_by_worker, so give at least --workers shards.

Threads: DataLoader workers already run torch.set_num_threads(1) (torch/utils/data/_utils/
worker.py), so each worker is one decoding/transforming thread, like a C++ worker; nothing
else is set. PIL decodes JPEG on one thread. The main process only receives batches.

Needs Debian's python3-torch, python3-torchvision, python3-pil, python3-numpy, python3-yaml
and python3-braceexpand, and the webdataset source tree (not packaged in Debian) named by the
environment variable WEBDATASET_SRC (the directory that contains the webdataset/ package).

Prints one JSON line: {"img_per_s", "images", "seconds", "mode", ...}. The clock starts just
before iter(DataLoader) (so it includes worker start-up, as a user sees it) and stops after the
last batch (including worker shutdown, which DataLoader does inside the last next()).

Peak RSS: `/usr/bin/time -f %M` reports the largest single process only, and the workers are
separate processes. --rss adds (all in KiB; it reads /proc/PID/status and smaps_rollup of each
process after every batch, about a millisecond beside a batch of 64 images):
  rss_self_kb          peak RSS of this process (getrusage RUSAGE_SELF)
  rss_children_max_kb  peak RSS of the largest waited-for child (RUSAGE_CHILDREN; Linux gives
                       the max over children, not their sum)
  rss_sum_kb           rss_self_kb + rss_children_max_kb: the approximation asked for; it
                       undercounts with more than one worker (only the largest child counts)
  rss_workers_kb       each worker's VmHWM (peak RSS) from /proc/PID/status, as last read
                       after a batch arrived (misses growth after a worker's last batch, and
                       workers that never delivered a batch)
  rss_sum_sampled_kb   rss_self_kb + sum(rss_workers_kb): sum of the peaks of every process
  pss_sum_max_kb       largest total PSS of this process and its live workers seen after a
                       batch: pages shared after fork (torch and its libraries, imported before
                       the workers fork) count once in all, not once per process
All of these are approximations of the memory the run needs. The RSS sums count the shared
pages once per process and add peaks that need not coincide, so they overstate the footprint
(by roughly the main process's size per worker); the PSS figure is sampled, so it can miss a
short peak between batches.
"""

import argparse
import json
import os
import resource
import sys
import time


def import_webdataset():
    src = os.environ.get("WEBDATASET_SRC")
    if src:
        sys.path.insert(0, os.path.abspath(src))
    try:
        import webdataset
    except ImportError as e:
        sys.exit(f"torchvision_peer.py: cannot import webdataset ({e}).\n"
                 "Set WEBDATASET_SRC to a checkout of github.com/webdataset/webdataset (the "
                 "directory holding the webdataset/ package), e.g. a `git archive v0.2.107 "
                 "webdataset` of the fetch mirror; it is not packaged in Debian. "
                 f"WEBDATASET_SRC={src!r}")
    return webdataset


def identity(x):
    return x


def transform(mode):
    from torchvision import transforms as T
    normalize = T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    if mode == "train":
        return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                          normalize])
    return T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor(), normalize])


def dataset(wds, a):
    if a.mode == "train":
        ds = wds.WebDataset(a.shards, shardshuffle=100)
        if a.shuffle > 0:
            ds = ds.shuffle(a.shuffle)
    else:
        ds = wds.WebDataset(a.shards, shardshuffle=False)
    return (ds.decode("pil").to_tuple("jpg", "cls")
            .map_tuple(transform(a.mode), identity).batched(a.batch))


def proc_kb(path, key):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def sample_memory(it, peaks, pss):
    """Records VmHWM of the DataLoader's live workers into peaks (pid -> KiB), and the largest
    PSS total seen (this process plus its live workers) into pss["max"]."""
    total = proc_kb("/proc/self/smaps_rollup", "Pss:") or 0
    for w in getattr(it, "_workers", []):
        if not w.pid:
            continue
        kb = proc_kb(f"/proc/{w.pid}/status", "VmHWM:")
        if kb is not None:
            peaks[w.pid] = max(kb, peaks.get(w.pid, 0))
        total += proc_kb(f"/proc/{w.pid}/smaps_rollup", "Pss:") or 0
    pss["max"] = max(total, pss.get("max", 0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["train", "eval"], required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--shuffle", type=int, default=1000, help="sample shuffle buffer (train)")
    ap.add_argument("--limit", type=int, default=0, help="stop after N images (0: all)")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the shards, timed together")
    ap.add_argument("--rss", action="store_true", help="add peak-RSS estimates (see above)")
    ap.add_argument("shards", nargs="+", help="tar shards (paths; brace patterns also work)")
    a = ap.parse_args()

    wds = import_webdataset()
    import torch
    ds = dataset(wds, a)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=a.workers)

    images = 0
    start = time.perf_counter()
    peaks, pss = {}, {}
    for _ in range(a.epochs):
        it = iter(loader)
        for images_batch, labels in it:
            images += images_batch.shape[0]
            if a.rss:
                sample_memory(it, peaks, pss)  # a few /proc reads per batch of 64 images
            if a.limit and images >= a.limit:
                break
        del it  # shuts the workers down, as the end of an epoch does
        if a.limit and images >= a.limit:
            break
    seconds = time.perf_counter() - start

    out = {"img_per_s": round(images / seconds, 2), "images": images,
           "seconds": round(seconds, 3), "mode": a.mode, "workers": a.workers,
           "batch": a.batch}
    if a.mode == "train":
        out["shuffle"] = a.shuffle
    if a.rss:
        self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        workers_kb = sorted(peaks.values())
        out.update(rss_self_kb=self_kb, rss_children_max_kb=child_kb,
                   rss_sum_kb=self_kb + child_kb, rss_workers_kb=workers_kb,
                   rss_sum_sampled_kb=self_kb + sum(workers_kb),
                   pss_sum_max_kb=pss.get("max", 0))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
