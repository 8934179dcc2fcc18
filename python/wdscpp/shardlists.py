"""webdataset's shard lists and splitters: the first stages of a DataPipeline.

SimpleShardList and ResampledShards yield {"url": url} dicts, split_by_node / split_by_worker /
single_node_only take every world_size-th (num_workers-th) item of any iterator, all as
webdataset's do. Followed by tarfile_to_samples() in a DataPipeline, the engine runs them in
C++: split_by_node becomes its split between ranks (equal sample counts per rank by default,
wds/split.hpp), split_by_worker its split between DataLoader workers.
"""

import itertools
import os
import random
import sys
import time

from . import _wdscpp
from .filters import pipelinefilter
from .utils import make_seed, pytorch_worker_info, pytorch_worker_seed


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


def expand_urls(urls):
    """A URL string as its list, as the engine expands it: "::" separates patterns, ${X} reads
    WDS_X, braces expand (and, beyond webdataset, directories and globs are listed)."""
    return _wdscpp._resolve_urls(urls)


def expand_source(source, max_urls=int(1e9)):
    if isinstance(source, str):
        return expand_urls(source)
    if isinstance(source, list):
        return source
    return list(itertools.islice(source, max_urls))


class _Dataset:
    """torch's IterableDataset when torch is there (DataLoader takes it), else object."""


try:
    from torch.utils.data import IterableDataset as _Dataset  # noqa: F811
except ImportError:  # pragma: no cover - torch is optional
    pass


class SimpleShardList(_Dataset):
    """The shards of urls (a pattern or a list) as {"url": url}, in order, or shuffled with
    seed (a number, or True for a seed from the clock)."""

    def __init__(self, urls, seed=None):
        super().__init__()
        self.urls = expand_urls(urls) if isinstance(urls, str) else list(urls)
        if not self.urls or not isinstance(self.urls[0], str):
            raise ValueError(f"SimpleShardList: no shard URLs in {urls!r}")
        self.seed = time.time() if seed is True else seed

    def __len__(self):
        return len(self.urls)

    def __iter__(self):
        urls = list(self.urls)
        if self.seed is not None:
            random.Random(self.seed).shuffle(urls)
        for url in urls:
            yield {"url": url}


class ResampledShards(_Dataset):
    """nshards shards drawn at random (with replacement) from urls, seeded by worker, epoch and
    seed; deterministic=False adds the process and the clock to the seed, as webdataset."""

    def __init__(self, urls, nshards=sys.maxsize, seed=0, worker_seed=None, deterministic=False,
                 max_urls=int(1e6), empty_check=True):
        super().__init__()
        self.urls = expand_source(urls, max_urls)
        if empty_check and not self.urls:
            raise ValueError("empty_check=True, but no shards found in ResampledShards")
        self.nshards = nshards
        self.worker_seed = pytorch_worker_seed if worker_seed is None else worker_seed
        self.deterministic = deterministic
        self.seed = seed
        self.epoch = -1

    def __iter__(self):
        self.epoch += 1
        parts = [self.worker_seed(), self.epoch, self.seed]
        if not self.deterministic:
            parts += [os.getpid(), time.time_ns(), os.urandom(4)]
        rng = random.Random(make_seed(*parts))
        for _ in range(self.nshards):
            yield {"url": self.urls[rng.randrange(len(self.urls))]}


ResampledShardList = ResampledShards


def _resampled(src, n=sys.maxsize):
    """n items drawn at random from src's items."""
    items = list(src)
    rng = random.Random(os.urandom(16))
    for _ in range(n):
        yield rng.choice(items)


resampled = pipelinefilter(_resampled)


def non_empty(src, message="pipeline stage received no data at all and this was declared as an "
                           "error"):
    """src's items; a ValueError(message) if there are none."""
    count = 0
    for item in src:
        yield item
        count += 1
    if count == 0:
        raise ValueError(message)


def shardspec(spec):
    """A shard list from a spec string (a pattern)."""
    return SimpleShardList(spec)


from .directory import DirectoryShardList  # noqa: E402,F401 - it builds on _Dataset above
