"""webdataset's shard splitters, and the WebDataset arguments that take them.

split_by_node, split_by_worker and single_node_only work on any iterator, as webdataset's do
(items rank, rank + world_size, ... of it). Given to WebDataset as nodesplitter= and
workersplitter=, wdscpp's own split_by_node and split_by_worker select the engine's split in
C++ (the default: by rank, then by loader worker, with equal counts per rank as wds/split.hpp
says); nodesplitter=None or a function of your own splits in Python, on the shard list, before
the engine splits it between workers.
"""

import itertools
import os

from . import _wdscpp


def pytorch_worker_info(group=None):
    """(rank, world_size, worker, num_workers), found as webdataset finds them: RANK and
    WORLD_SIZE, else an initialised torch.distributed, else the launcher variables wds reads
    (Open MPI, SLURM, ...); WORKER and NUM_WORKERS, else torch's DataLoader worker, else 0, 1."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    else:
        rank, world_size = None, None
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                group = group or dist.group.WORLD
                rank, world_size = dist.get_rank(group=group), dist.get_world_size(group=group)
        except ImportError:
            pass
        if rank is None:
            rank, world_size = _wdscpp._distributed()
    if "WORKER" in os.environ and "NUM_WORKERS" in os.environ:
        worker, num_workers = int(os.environ["WORKER"]), int(os.environ["NUM_WORKERS"])
    else:
        worker, num_workers = 0, 1
        try:
            import torch.utils.data

            info = torch.utils.data.get_worker_info()
            if info is not None:
                worker, num_workers = info.id, info.num_workers
        except ImportError:
            pass
    return rank, world_size, worker, num_workers


def split_by_node(src, group=None):
    """This rank's items of src: rank, rank + world_size, ..."""
    rank, world_size, _, _ = pytorch_worker_info(group=group)
    if world_size > 1:
        yield from itertools.islice(src, rank, None, world_size)
    else:
        yield from src


def split_by_worker(src):
    """This DataLoader worker's items of src: worker, worker + num_workers, ..."""
    _, _, worker, num_workers = pytorch_worker_info()
    if num_workers > 1:
        yield from itertools.islice(src, worker, None, num_workers)
    else:
        yield from src


def single_node_only(src, group=None):
    """src unchanged on one node; a ValueError on several, as in webdataset."""
    _, world_size, _, _ = pytorch_worker_info(group=group)
    if world_size > 1:
        raise ValueError(
            "you need to add an explicit nodesplitter to your input pipeline for multi-node "
            "training (wdscpp.split_by_node, or nodesplitter=None to read every shard on every "
            "node)"
        )
    yield from src


def WebDataset(
    urls,
    *,
    nodesplitter=split_by_node,
    workersplitter=split_by_worker,
    mode=None,
    detshuffle=False,
    empty_check=True,
    repeat=False,
    verbose=False,
    url_to_name=None,
    **options,
):
    """wdscpp's WebDataset (see _wdscpp.WebDataset for its arguments) with webdataset's
    nodesplitter= and workersplitter=. The defaults split in C++ (by rank, then by loader
    worker). nodesplitter=single_node_only refuses more than one rank; None reads every shard
    on every rank; a function of your own gets an iterator of {"url": url} dicts (as
    webdataset's shard lists give) and its output is this rank's shard list. The split between
    loader workers is always the engine's: workersplitter takes split_by_worker only.

    Also webdataset's mode="resampled" (resampled=True). Taken and without effect here:
    detshuffle (a shard shuffle is always deterministic, from seed and epoch), empty_check (an
    empty pass yields nothing; the default split refuses a shard count that would leave a rank
    without shards), and repeat, verbose and url_to_name, which webdataset takes and does not use
    either."""
    del detshuffle, empty_check, repeat, verbose, url_to_name
    if mode == "resampled":
        options["resampled"] = True
    elif mode is not None:
        raise ValueError(f"WebDataset: mode={mode!r}: only 'resampled' (or None)")
    if workersplitter is not split_by_worker:
        raise ValueError(
            "workersplitter: wdscpp splits shards between loader workers itself; pass "
            "wdscpp.split_by_worker (the default) or leave it out"
        )
    if nodesplitter is split_by_node:
        return _wdscpp.WebDataset(urls, **options)
    rank, world_size = options.get("rank"), options.get("world_size")
    if nodesplitter is single_node_only:
        if _wdscpp._distributed(rank, world_size)[1] > 1:
            list(single_node_only([], None))  # raises webdataset's ValueError
        return _wdscpp.WebDataset(urls, **options)
    if rank is not None or world_size is not None:
        raise ValueError("nodesplitter: give rank and world_size only with split_by_node")
    if options.get("streams"):
        raise ValueError("nodesplitter: streams= deal the streams between ranks; use split_by_node")
    if nodesplitter and options.get("resampled"):
        raise ValueError(
            "nodesplitter: a function of your own splits a shard list, but resampled=True draws "
            "shards in C++; use split_by_node or None"
        )
    if options.get("resampled"):
        # nodesplitter=None, as webdataset users write it with resampled=True: every rank draws
        # shards on its own, which the engine does (seeded by rank and worker).
        return _wdscpp.WebDataset(urls, **options)
    options["rank"], options["world_size"] = 0, 1  # the split, if any, is nodesplitter's
    if not nodesplitter:
        return _wdscpp.WebDataset(urls, **options)
    shards = _wdscpp._resolve_urls(urls) if isinstance(urls, str) else list(urls)
    mine = [item["url"] if isinstance(item, dict) else item
            for item in nodesplitter(iter({"url": u} for u in shards))]
    return _wdscpp.WebDataset(mine, **options)
