"""webdataset's WebDataset, FluidInterface, FluidWrapper and WebLoader on wdscpp's DataPipeline.

    dataset = wds.WebDataset(urls, shardshuffle=100).shuffle(1000).decode("rgb8").to_tuple(
        "jpg", "cls").batched(64)
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=4)
    loader = loader.unbatched().shuffle(1000).batched(64)

Where wdscpp differs from webdataset on purpose (README, "Differences from webdataset"): the
default nodesplitter is split_by_node (the engine's split, equal sample counts per rank), not
single_node_only; shardshuffle=True is one permutation per epoch; a shard shuffle is always
deterministic (seed, epoch).
"""

import os
import sys
import warnings

from . import filters
from .filters import default_collation_fn
from .handlers import reraise_exception
from .pipeline import DataPipeline, ShardShuffle, _plan_engine, check_empty
from .shardlists import ResampledShards, SimpleShardList, split_by_node, split_by_worker
from .tariterators import tarfile_to_samples


# wdscpp's own WebDataset arguments (its engine's: see _wdscpp.WebDataset).
_ENGINE_OPTIONS = {"split_policy", "rank", "world_size", "nshards", "allow_empty", "streams",
                   "stream_shuffle", "join", "interleave_shards"}


class FluidInterface:
    """The fluent methods: each returns a copy of the pipeline with one more stage."""

    def batched(self, batchsize, collation_fn=default_collation_fn, partial=True):
        return self.compose(filters.batched(batchsize, collation_fn=collation_fn, partial=partial))

    def unbatched(self):
        return self.compose(filters.unbatched())

    def listed(self, batchsize, partial=True):
        return self.compose(filters.batched(batchsize=batchsize, collation_fn=None, partial=partial))

    def unlisted(self):
        return self.compose(filters.unlisted())

    def log_keys(self, logfile=None):
        return self.compose(filters.log_keys(logfile))

    def shuffle(self, size, **kw):
        if size < 1:
            return self
        return self.compose(filters.shuffle(size, **kw))

    def map(self, f, handler=reraise_exception):
        return self.compose(filters.map(f, handler=handler))

    def decode(self, *args, pre=None, post=None, only=None, partial=False,
               handler=reraise_exception, **image_options):
        """webdataset's decode; and wdscpp's image options (resize=, crop=,
        random_resized_crop=, scale=, ratio=, flip=, normalize=, layout=, dtype=, full_decode=:
        see _wdscpp.Dataset.decode), which the engine applies while it decodes."""
        kw = dict(image_options, handler=handler)
        if pre is not None:
            kw["pre"] = pre
        if post is not None:
            kw["post"] = post
        if only is not None:
            kw["only"] = only
        if partial:
            kw["partial"] = partial
        return self.compose(filters.decode(*args, **kw))

    def map_dict(self, handler=reraise_exception, **kw):
        return self.compose(filters.map_dict(handler=handler, **kw))

    def select(self, predicate, **kw):
        return self.compose(filters.select(predicate, **kw))

    def to_tuple(self, *args, **kw):
        return self.compose(filters.to_tuple(*args, **kw))

    def map_tuple(self, *args, handler=reraise_exception):
        return self.compose(filters.map_tuple(*args, handler=handler))

    def slice(self, *args):
        return self.compose(filters.slice(*args))

    def rename(self, **kw):
        return self.compose(filters.rename(**kw))

    def rsample(self, p=0.5):
        return self.compose(filters.rsample(p))

    def rename_keys(self, *args, **kw):
        return self.compose(filters.rename_keys(*args, **kw))

    def extract_keys(self, *args, **kw):
        return self.compose(filters.extract_keys(*args, **kw))

    def xdecode(self, *args, **kw):
        return self.compose(filters.xdecode(*args, **kw))

    def mcached(self):
        return self.compose(filters.Cached())


class WebDataset(DataPipeline, FluidInterface):
    """The samples of the shards `urls` (a pattern, "a::b" patterns, or a list), as
    webdataset's WebDataset: each a dict of the sample's fields ("__key__", "__url__", and the
    member data as bytes until decode()). Reading, splitting and shuffling run in C++.

    Arguments as webdataset 1.0's: handler, mode="resampled" / resampled, shardshuffle (a
    buffer of shard URLs; True: a permutation per epoch), cache_dir and cache_size (remote shards
    kept on disk), nodesplitter (default split_by_node: see the module docstring),
    workersplitter, select_files and rename_files (on member names), empty_check (a pass
    without samples is a ValueError), seed; detshuffle, repeat, verbose and url_to_name are
    taken without effect (the engine's shuffles are always deterministic). wdscpp's own: join
    (patterns of shard sets holding other fields of the same samples, same keys in the same
    order, read in lockstep: column stores), interleave_shards (shards each worker reads at
    once, one sample from each in turn), split_policy, rank, world_size, nshards, allow_empty,
    streams, stream_shuffle."""

    def __init__(self, urls, handler=reraise_exception, mode=None, resampled=False, repeat=False,
                 shardshuffle=None, cache_size=-1, cache_dir=None, url_to_name=None,
                 detshuffle=False, nodesplitter=split_by_node, workersplitter=split_by_worker,
                 select_files=None, rename_files=None, empty_check=True, verbose=False,
                 seed=None, **engine_options):
        super().__init__()
        unknown = set(engine_options) - _ENGINE_OPTIONS
        if unknown:
            raise TypeError(f"WebDataset() got unexpected keyword arguments {sorted(unknown)}")
        if "rank" in engine_options or "world_size" in engine_options or engine_options.get(
                "streams"):
            if nodesplitter not in (split_by_node, None):
                raise ValueError("nodesplitter: give rank, world_size or streams only with "
                                 "split_by_node (the default)")
        if resampled:
            mode = "resampled"
        if mode not in (None, "resampled"):
            raise ValueError(f"WebDataset: mode={mode!r}: only 'resampled' (or None)")
        if mode == "resampled" and shardshuffle not in (False, None):
            warnings.warn("WebDataset(shardshuffle=...) is ignored with resampled=True: every "
                          "worker draws its shards at random", UserWarning, stacklevel=2)
            shardshuffle = None
        self.seed = int(os.environ.get("WDS_SEED", 0)) if seed is None else seed
        cache_size = int(os.environ.get("WDS_CACHE_SIZE", cache_size))
        cache_dir = os.environ.get("WDS_CACHE", cache_dir)
        if isinstance(urls, str) and urls.endswith((".yaml", ".yml", ".json")):
            raise ValueError(f"WebDataset({urls!r}): dataset description files are not read; "
                             "give the shard URLs (a pattern or a list)")
        if mode == "resampled":
            self.append(ResampledShards(urls, seed=self.seed))
        else:
            self.append(SimpleShardList(urls))
        if nodesplitter is not None:
            self.append(nodesplitter)
        if workersplitter:
            self.append(workersplitter)
        if shardshuffle not in (None, False, 0):
            self.append(ShardShuffle(shardshuffle, self.seed))
        tar = tarfile_to_samples(handler=handler, select_files=select_files,
                                 rename_files=rename_files)
        if cache_dir is not None and cache_size != 0:
            cache_dir = os.path.expanduser(cache_dir)
            if not os.path.isdir(cache_dir):
                raise ValueError(f"cache directory {cache_dir} does not exist")
            engine_options.update(cache_dir=cache_dir, cache_size=cache_size)
        tar.engine_options = engine_options
        self.append(tar)
        if empty_check:
            self.append(check_empty)
        # Bad arguments are errors here, as webdataset's are, not at the first pass.
        plan = _plan_engine(self.pipeline)
        if engine_options.get("join") and plan is None:
            # Joined shard sets are read by the engine only: refused, never silently unjoined.
            raise ValueError("WebDataset(join=...) needs the C++ engine, which this pipeline "
                             "cannot use (select_files, rename_files or a custom splitter)")
        if engine_options.get("interleave_shards", 1) != 1 and plan is None:
            # The order of samples would silently change back: refused, as join is.
            raise ValueError("WebDataset(interleave_shards=...) needs the C++ engine, which this "
                             "pipeline cannot use (select_files, rename_files or a custom "
                             "splitter)")

    def compose(self, *args):
        result = super().compose(*args)
        _plan_engine(result.pipeline)  # bad arguments of a stage are errors here
        return result

    def __enter__(self):
        return self

    def __exit__(self, *args):
        self.close()


class FluidWrapper(DataPipeline, FluidInterface):
    """Any iterable (a DataLoader, a dataset) with the fluent methods."""

    def __init__(self, initial):
        super().__init__()
        self.append(initial)


# DataLoader arguments the engine's threads honour as DataLoader would (or that change nothing
# with batch_size=None); any other makes WebLoader a DataLoader.
_LOADER_ARGS = {"batch_size", "num_workers", "prefetch_factor", "persistent_workers", "shuffle",
                "pin_memory", "timeout", "multiprocessing_context", "drop_last"}


class EngineLoader:
    """What DataLoader(pipeline, batch_size=None, num_workers=N) yields, made by N threads of
    a wdscpp.Loader over the pipeline's engine form instead of N worker processes: the same
    split between workers (split_by_worker), items converted as DataLoader converts them (NumPy
    arrays and wdscpp tensors as torch tensors, without a copy), with_epoch(n) counting n per
    worker as webdataset's does; no process start, no copy of each batch into shared memory."""

    def __init__(self, dataset, plan, workers, prefetch):
        self.dataset, self.plan, self.workers, self.prefetch = dataset, plan, workers, prefetch
        self.loader, self.epoch = None, None

    def __iter__(self):
        from torch.utils.data import default_convert

        from .filters import to_python
        from .pipeline import Loader

        ds = self.dataset
        if self.loader is None:
            epoch = None
            if ds.repetitions == sys.maxsize and ds.nsamples > 0:
                epoch = ds.nsamples * self.workers  # with_epoch: per worker, as in DataLoader
            # ordered: round-robin over the workers, as DataLoader hands out their batches.
            self.loader = Loader(self.plan.ds, workers=self.workers, prefetch=self.prefetch,
                                 ordered=True, epoch_length=epoch)
        if ds._epoch is not None and ds._epoch != self.epoch:  # dataset.set_epoch(e) since
            self.loader.set_epoch(ds._epoch)
            self.epoch = ds._epoch
        items = (default_convert(to_python(x, torch_tensors=True)) for x in self.loader)
        yield from check_empty(items) if self.plan.empty_check else items


def _engine_loader(args, kw):
    """An EngineLoader for DataLoader(*args, **kw) when it would yield the same, else None."""
    dataset = args[0] if args else kw.get("dataset")
    rest = dict(kw)
    rest.pop("dataset", None)
    if len(args) > 1 or not isinstance(dataset, DataPipeline) or set(rest) - _LOADER_ARGS:
        return None
    if "batch_size" not in rest or rest["batch_size"] is not None:
        return None  # DataLoader batches (its default batch_size is 1)
    workers = rest.get("num_workers", 0)
    if workers < 1 or rest.get("shuffle") or rest.get("pin_memory") or rest.get("timeout"):
        return None
    if dataset.repetitions not in (1, sys.maxsize) or (
            dataset.repetitions == sys.maxsize and dataset.nsamples <= 0):
        return None
    plan = dataset._plan()
    if plan is None or plan.end < len(dataset.pipeline) or not plan.by_worker:
        return None  # a Python stage, or every worker reading every shard
    return EngineLoader(dataset, plan, workers, rest.get("prefetch_factor") or 2)


class WebLoader(DataPipeline, FluidInterface):
    """torch's DataLoader(*args, **kw) with the fluent methods: WebLoader(ds, batch_size=None,
    num_workers=4).unbatched().shuffle(1000).batched(64) mixes batches across workers.

    When `ds` runs whole in the engine and batches itself (batch_size=None), the N workers are
    threads of a wdscpp.Loader (EngineLoader) rather than processes, yielding what the
    DataLoader would; otherwise it is a DataLoader."""

    def __init__(self, *args, **kw):
        source = _engine_loader(args, kw)
        if source is None:
            from torch.utils.data import DataLoader

            source = DataLoader(*args, **kw)
        super().__init__(source)


__all__ = ["FluidInterface", "FluidWrapper", "WebDataset", "WebLoader", "check_empty"]
