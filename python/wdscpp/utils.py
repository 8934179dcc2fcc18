"""webdataset.utils: what its pipelines share (worker info, seeds, repeatedly)."""

import itertools
import os
import sys


# webdataset's WDS_SECURE=1: no decoding of pickles and torch files from shards.
enforce_security = bool(int(os.environ.get("WDS_SECURE", "0")))


class PipelineStage:
    """A stage with state (detshuffle, ...): a pipeline calls its run(src)."""

    def run(self, src):
        raise NotImplementedError


def identity(x):
    return x


def is_iterable(obj):
    return not isinstance(obj, (str, bytes)) and hasattr(obj, "__iter__")


def pytorch_worker_info(group=None):
    """(rank, world_size, worker, num_workers), found as webdataset finds them: RANK and
    WORLD_SIZE, else an initialised torch.distributed, else the launcher variables wds reads
    (Open MPI, SLURM, ...); WORKER and NUM_WORKERS, else torch's DataLoader worker, else 0, 1."""
    from . import _wdscpp

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


def pytorch_worker_seed(group=None):
    rank, _, worker, _ = pytorch_worker_info(group=group)
    return rank * 1000 + worker


def make_seed(*args):
    seed = 0
    for arg in args:
        seed = (seed * 31 + hash(arg)) & 0x7FFFFFFF
    return seed


def repeatedly0(loader, nepochs=sys.maxsize, nbatches=sys.maxsize):
    for _ in range(nepochs):
        yield from itertools.islice(loader, nbatches)


def guess_batchsize(batch):
    return len(batch[0])


def repeatedly(source, nepochs=None, nbatches=None, nsamples=None, batchsize=guess_batchsize):
    """source's items pass after pass, until nepochs passes, nbatches items or nsamples
    samples (batchsize(item) each)."""
    epoch = count = total = 0
    while True:
        for item in source:
            yield item
            count += 1
            if nbatches is not None and count >= nbatches:
                return
            if nsamples is not None:
                total += batchsize(item)
                if total >= nsamples:
                    return
        epoch += 1
        if nepochs is not None and epoch >= nepochs:
            return
