"""wdscpp: the wds C++ engine from Python, with webdataset's vocabulary.

    import wdscpp
    ds = (wdscpp.WebDataset("/data/train-{000000..000099}.tar", shardshuffle=True, seed=7)
          .shuffle(1000).decode("rgb8").to_tuple("jpg;png", "cls").batched(64))
    for images, labels in wdscpp.Loader(ds, workers=4, prefetch=2):
        x = torch.from_dlpack(images)     # or images.numpy(): the same memory, no copy

The module is named wdscpp so that it is never confused with Python's webdataset (often
imported as wds). Stages run in C++ on the loader's threads, without the GIL; a Python callable
given to map() or select() takes the GIL for each call. Tensors are wdscpp.Tensor objects
(__dlpack__, numpy()); samples are dict-like (s["__key__"], s["jpg"], s.keys()).
TarWriter and ShardWriter write shards as webdataset's do (wdscpp.writers).
The PyTorch helper is wdscpp.torch (imported on its own: it needs torch).
"""

from ._wdscpp import (  # noqa: F401
    CorruptDataError,
    Dataset,
    DecodedSample,
    Error,
    InvalidArgumentError,
    Loader,
    NotFoundError,
    PermissionDeniedError,
    Sample,
    Tensor,
    UnavailableError,
    __version__,
    ignore_and_continue,
    merge_states,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from .splitters import (  # noqa: F401
    WebDataset,
    pytorch_worker_info,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from .writers import ShardWriter, TarWriter  # noqa: F401

__all__ = [
    "__version__",
    "CorruptDataError",
    "Dataset",
    "DecodedSample",
    "Error",
    "InvalidArgumentError",
    "Loader",
    "NotFoundError",
    "PermissionDeniedError",
    "Sample",
    "ShardWriter",
    "TarWriter",
    "Tensor",
    "UnavailableError",
    "WebDataset",
    "pytorch_worker_info",
    "single_node_only",
    "split_by_node",
    "split_by_worker",
    "merge_states",
    "ignore_and_continue",
    "ignore_and_stop",
    "reraise_exception",
    "warn_and_continue",
    "warn_and_stop",
]
