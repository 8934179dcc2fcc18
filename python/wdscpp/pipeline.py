"""DataPipeline: webdataset's pipeline of stages, run by the C++ engine as far as it can.

    ds = wds.DataPipeline(
        wds.SimpleShardList("/data/train-{000000..000099}.tar"),
        wds.split_by_node, wds.split_by_worker,
        wds.tarfile_to_samples(),
        wds.shuffle(1000), wds.decode("rgb8"), wds.to_tuple("jpg", "cls"), wds.batched(64))
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=4)

Each pass plans afresh, in the process that iterates (a DataLoader worker builds its own engine
pipeline there, from the pickled stages, and takes its share by torch's worker info): a shard
list (SimpleShardList, ResampledShards), its splitters and shard shuffle, and tarfile_to_samples
become one engine WebDataset; each stage after that joins the engine while the engine has it
(filters.Stage.engine), without the GIL; the first one it has not and all after it run in
Python on the engine's items, made webdataset's (dicts, numpy arrays). A pipeline whose first
stage is anything else runs entirely in Python, as webdataset's, shards read by the engine one at
a time. Not thread-safe: one consumer per pipeline object, as a Python iterator.
"""

import copy
import os
import sys
from itertools import islice

from . import _wdscpp, utils
from .filters import Stage, _engine_handler, _shuffle, to_python
from .shardlists import (
    ResampledShards,
    SimpleShardList,
    _Dataset,
    non_empty,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from .tariterators import tarfile_samples
from .utils import PipelineStage, pytorch_worker_info


def check_empty(source):
    """source's items; a ValueError if there are none (WebDataset's empty_check)."""
    return non_empty(source, "No samples found in dataset; perhaps you have fewer shards than "
                     "workers.\nTurn off using empty_check=False in the WebDataset constructor.")


class ShardShuffle(Stage):
    """WebDataset's shardshuffle=: a buffer of n shard URLs (True: one permutation per epoch in
    the engine, a buffer of 100 in Python, as webdataset), seeded."""

    def __init__(self, shardshuffle, seed):
        n = 100 if shardshuffle is True else int(shardshuffle)
        super().__init__(_shuffle, (n,), {"seed": seed})
        self.shardshuffle = shardshuffle


class _Plan:
    """A pipeline's engine part: `ds`, the engine Dataset; `end`, the index of the first stage it
    does not run; `torch`, image specs made torch tensors; `by_worker`, split_by_worker is among
    the shard stages; `empty_check`, WebDataset's check follows the reader; `pid`, the process
    that made it. Stage.engine(ds, plan) may set `torch`."""

    def __init__(self, ds, by_worker):
        self.ds, self.by_worker = ds, by_worker
        self.end, self.torch, self.empty_check, self.pid = 0, False, False, os.getpid()


def _plan_engine(stages):
    """The _Plan of a pipeline the engine can start, else None."""
    src = stages[0]
    if type(src) not in (SimpleShardList, ResampledShards):
        return None
    options = {}
    if isinstance(src, ResampledShards):
        options["resampled"] = True
        if src.nshards != sys.maxsize:
            options["nshards"] = src.nshards
        if src.seed is not None:
            options["seed"] = int(src.seed)
    elif src.seed is not None:
        options["shardshuffle"] = True
        options["seed"] = int(src.seed) & ((1 << 63) - 1)
    node, by_worker, tar = None, False, None
    i = 1
    while i < len(stages):
        s = stages[i]
        if s is split_by_node or s is single_node_only:
            node = s
        elif s is split_by_worker:
            by_worker = True
        elif isinstance(s, ShardShuffle):
            if not options.get("resampled"):
                options["shardshuffle"] = s.shardshuffle
                if s.kw.get("seed") is not None:
                    options["seed"] = int(s.kw["seed"]) & ((1 << 63) - 1)
        elif isinstance(s, Stage) and s.f is _shuffle and not options.get("resampled"):
            options["shardshuffle"] = int(s.args[0] if s.args else s.kw.get("bufsize", 1000))
        elif isinstance(s, Stage) and s.f is tarfile_samples or s is tarfile_samples:
            tar = s if isinstance(s, Stage) else Stage(tarfile_samples, (), {})
            break
        else:
            return None
        i += 1
    if tar is None or tar.args or set(tar.kw) - {"handler", "select_files", "rename_files"}:
        return None
    if tar.kw.get("select_files") or tar.kw.get("rename_files"):
        return None  # member filters run on the members, in Python (tariterators)
    rank, world_size, worker, num_workers = pytorch_worker_info()
    if node is single_node_only and world_size > 1:
        list(single_node_only([]))  # webdataset's ValueError
    engine_options = dict(getattr(tar, "engine_options", {}))
    if node is split_by_node:
        # The engine's split; rank and world_size given to WebDataset win, and with streams
        # the engine finds them itself.
        if not engine_options.get("streams"):
            options["rank"], options["world_size"] = rank, world_size
    else:
        options["rank"], options["world_size"] = 0, 1
    # pipe: URLs run as webdataset runs them, unless its enforce_security (WDS_SECURE=1) is on.
    options["allow_pipe"] = not utils.enforce_security
    options.update(engine_options)
    if not options.get("resampled") and not options.get("streams"):
        # An empty share yields nothing, as in webdataset; WebDataset's empty_check (in
        # Python, after the engine) makes that an error.
        options.setdefault("allow_empty", True)
    options["handler"] = _engine_handler(tar.kw.get("handler"))
    ds = _wdscpp.WebDataset(src.urls, **options)
    if by_worker and num_workers > 1:
        ds = ds.with_worker(worker, num_workers)
    plan = _Plan(ds, by_worker)
    i += 1
    while i < len(stages):
        s = stages[i]
        if s is check_empty:
            plan.empty_check = True
        else:
            engine = getattr(s, "engine", None)
            out = engine(plan.ds, plan) if engine is not None else None
            if out is None:
                break
            plan.ds = out
        i += 1
    plan.end = i
    return plan


class _EnginePass:
    """A pass over a pipeline's kept engine form (the next pass continues where it ends, and
    state() reads its position); the pipeline is busy until the pass ends or is dropped."""

    def __init__(self, pipeline, plan, check):
        pipeline._engine_busy = True
        self.pipeline = pipeline
        items = (to_python(x, plan.torch) for x in plan.ds)
        self.items = check_empty(items) if check else items

    def __iter__(self):
        return self

    def __next__(self):
        try:
            return next(self.items)
        except BaseException:  # the end, or an error: either way the pass is over
            self.release()
            raise

    def release(self):
        if self.pipeline is not None:
            self.pipeline._engine_busy = False
            self.pipeline = None

    __del__ = release


class DataPipeline(_Dataset, PipelineStage):
    """webdataset's DataPipeline(source, stage, ...): a torch IterableDataset when torch is
    installed. Stages are shard lists, iterables, callables on an iterator, or lists of them."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.pipeline = []
        self.repetitions = 1
        self.nsamples = -1
        self._kept = None  # the engine form's _Plan, once engine() made it
        self._restored = False
        self._engine_busy = False
        self._epoch = None
        for arg in args:
            if arg is None:
                continue
            if isinstance(arg, list):
                self.pipeline.extend(arg)
            else:
                self.pipeline.append(arg)

    # --- webdataset's API ---

    def invoke(self, f, *args, **kwargs):
        """Runs one stage: an iterable source when args is empty, else f(upstream)."""
        if isinstance(f, list) or not args and (isinstance(f, _Dataset) or not callable(f)):
            return iter(f)  # a source: a dataset, a DataLoader, a list
        if isinstance(f, PipelineStage):
            return f.run(*args, **kwargs)
        if callable(f):
            return f(*args, **kwargs)
        raise ValueError(f"{f}: not a valid pipeline stage")

    def iterator1(self):
        """One pass through the stages."""
        plan = self._plan()
        if plan is None:
            source = self.invoke(self.pipeline[0])
            rest = self.pipeline[1:]
        else:
            source = (to_python(x, plan.torch) for x in plan.ds)
            if plan.empty_check:
                source = check_empty(source)
            rest = self.pipeline[plan.end:]
        for stage in rest:
            source = self.invoke(stage, source)
        return source

    def iterator(self):
        for _ in range(self.repetitions):
            count = 0
            for item in self.iterator1():
                yield item
                count += 1
            if count == 0:
                break  # an empty pass: more passes would loop for ever

    def __iter__(self):
        self._forget_if_forked()
        if not self._engine_busy:
            try:
                self.engine()
            except TypeError:
                pass  # a stage runs in Python: passes as webdataset's, below
            else:
                # After restore() the rest of a pass may be empty without anything wrong.
                check = self._kept.empty_check and not self._restored
                self._restored = False
                return _EnginePass(self, self._kept, check)
        # Python passes; also when another iterator of this pipeline is mid-pass over the kept
        # engine pipeline (RoundRobin([ds, ds]), zip): webdataset's iterators are independent.
        if self.repetitions != 1 and self.nsamples > 0:
            return islice(self.iterator(), self.nsamples)
        return self.iterator()

    def stage(self, i):
        return self.pipeline[i]

    def append(self, f):
        """Appends a stage to this pipeline (modifies it)."""
        self.pipeline.append(f)
        self._kept = None

    def compose(self, *args):
        """A copy of this pipeline with the stages appended."""
        result = copy.copy(self)
        result.pipeline = list(self.pipeline)
        result._kept, result._engine_busy = None, False
        for arg in args:
            result.append(arg)
        return result

    def with_length(self, n, silent=False):
        """len() of this pipeline is n (the pass is not changed; see with_epoch)."""
        self.size = n
        return self

    def __len__(self):
        size = getattr(self, "size", None)
        if size is None and self.repetitions == sys.maxsize and self.nsamples > 0:
            size = self.nsamples  # with_epoch(n): every pass is n items
        if size is None:
            raise TypeError("this pipeline has no length: use with_length(n) or with_epoch(n)")
        return size

    def with_epoch(self, nsamples=-1, nbatches=-1):
        """Each pass yields exactly max(nsamples, nbatches) items, repeating the data as needed."""
        self.repetitions = sys.maxsize
        self.nsamples = max(nsamples, nbatches)
        self._kept = None
        return self

    def repeat(self, nepochs=-1, nbatches=-1):
        """nepochs passes of the data per pass of this pipeline (or for ever), at most nbatches
        items."""
        self.repetitions = nepochs if nepochs > 0 else sys.maxsize
        self.nsamples = nbatches
        self._kept = None
        return self

    def close(self):
        for stage in self.pipeline:
            if hasattr(stage, "close"):
                stage.close()
        self._kept = None

    def __getstate__(self):
        # A DataLoader worker gets the stages; it plans its own engine pipeline.
        state = dict(self.__dict__)
        state["_kept"], state["_engine_busy"] = None, False
        return state

    # --- the engine form: what wdscpp.Loader and states work on ---

    def engine(self):
        """This pipeline as one engine Dataset (kept: state(), restore() and set_epoch() act
        on it): for wdscpp.Loader's threads and for resuming. A TypeError if a stage must run in
        Python."""
        self._forget_if_forked()
        if self._kept is None:
            plan = self._plan()
            if plan is None or plan.end < len(self.pipeline):
                first = self.pipeline[0 if plan is None else plan.end]
                raise TypeError(
                    f"this pipeline's stage {first!r} runs in Python, not in the engine: iterate "
                    "the pipeline itself (or through torch's DataLoader) instead")
            ds = plan.ds
            if self.repetitions == sys.maxsize and self.nsamples > 0:
                ds = ds.with_epoch(self.nsamples)
            elif self.repetitions != 1:
                ds = ds.repeat(None if self.repetitions == sys.maxsize else self.repetitions)
                if self.nsamples > 0:
                    ds = ds.slice(0, self.nsamples)
            if getattr(self, "size", None) is not None:
                ds = ds.with_length(self.size)
            plan.ds = ds
            self._kept = plan
        return self._kept.ds

    def _forget_if_forked(self):
        # Forked (a DataLoader worker) after the parent made the engine form: the parent's has
        # the parent's worker split; plan again here.
        if self._kept is not None and self._kept.pid != os.getpid():
            self._kept, self._engine_busy = None, False

    def _plan(self):
        plan = _plan_engine(self.pipeline) if self.pipeline else None
        if plan is not None:
            epoch = self._epoch
            if epoch is None:
                # A DataLoader worker (a fresh copy each epoch): torch's seed of this iteration
                # of the DataLoader, so each epoch has another order, as webdataset's.
                try:
                    from torch.utils.data import get_worker_info

                    info = get_worker_info()
                    if info is not None:
                        epoch = (info.seed - info.id) & ((1 << 63) - 1)
                except ImportError:
                    pass
            if epoch is not None:
                plan.ds.set_epoch(epoch)
        return plan

    def set_epoch(self, epoch):
        """The epoch the next pass reads (its shard and sample order; later passes go on to the
        next epochs). The engine's shuffles are deterministic from (seed, epoch): call it at each
        epoch, as with torch's DistributedSampler, and every kind of worker reads that epoch."""
        self._epoch = epoch
        if self._kept is not None:
            self._kept.ds.set_epoch(epoch)

    def state(self):
        """The engine form's position (bytes), as of the items it has yielded."""
        return self.engine().state()

    def restore(self, state):
        """Continues the engine form where state() was taken."""
        self.engine().restore(state)
        self._restored = True

    def fingerprint(self):
        return self.engine().fingerprint()

    @property
    def epoch(self):
        return self.engine().epoch if self._epoch is None else self._epoch

    @property
    def item_kind(self):
        return self.engine().item_kind


class Loader(_wdscpp.Loader):
    """wdscpp's threaded loader (see _wdscpp.Loader) over a pipeline's engine form: C++ worker
    threads, tensors handed over without a copy (DLPack), resumable."""

    def __init__(self, dataset, *args, **kwargs):
        if isinstance(dataset, DataPipeline):
            dataset = dataset.engine()
        super().__init__(dataset, *args, **kwargs)


__all__ = ["DataPipeline", "Loader", "check_empty"]
