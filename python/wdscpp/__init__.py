"""wdscpp: the wds C++ engine, with webdataset's API: `import wdscpp as wds` runs webdataset code.

    import wdscpp as wds
    dataset = (wds.WebDataset("/data/train-{000000..000099}.tar", shardshuffle=100)
               .shuffle(1000).decode("rgb8").to_tuple("jpg;png", "cls").batched(64))
    loader = wds.WebLoader(dataset, batch_size=None, num_workers=4)
    for images, labels in loader: ...

webdataset's names mean what they mean there: WebDataset and DataPipeline with their stages
(filters), shard lists and splitters, decoders (autodecode), TarWriter and ShardWriter, the error
handlers, RandomMix and RoundRobin. Reading, splitting, shuffling, decoding into arrays and
batching run in C++ without the GIL; Python callables run as Python (pipeline.py says where the
line falls). wdscpp's own additions: Loader (C++ worker threads, tensors through DLPack, states
to resume mid-epoch), merge_states, the exception classes naming URL and member, and
wdscpp.torch (TorchDataset, for StatefulDataLoader-style checkpoints).
"""

from . import autodecode, cache, filters, handlers, shardlists, tariterators, tenbin, utils  # noqa: F401
from ._wdscpp import (  # noqa: F401
    CorruptDataError,
    Dataset,
    DecodedSample,
    Error,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    Sample,
    Tensor,
    UnavailableError,
    __version__,
    merge_states,
)
from .autodecode import (  # noqa: F401
    Continue,
    Decoder,
    DecodingError,
    gzfilter,
    handle_extension,
    imagehandler,
    pytorch_weights_only,
    torch_loads,
)
from .cache import LRUCleanup, pipe_cleaner  # noqa: F401
from .directory import DirectoryShardList  # noqa: F401
from .compat import FluidInterface, FluidWrapper, WebDataset, WebLoader  # noqa: F401
from .extradatasets import MockDataset  # noqa: F401
from .filters import (  # noqa: F401
    Cached,
    associate,
    batched,
    compose,
    decode,
    detshuffle,
    extract_keys,
    getfirst,
    info,
    map,
    map_dict,
    map_tuple,
    pipelinefilter,
    rename,
    rename_keys,
    rsample,
    select,
    shuffle,
    slice,
    to_tuple,
    transform_with,
    unbatched,
    xdecode,
)
from .handlers import (  # noqa: F401
    ignore_and_continue,
    ignore_and_stop,
    reraise_exception,
    warn_and_continue,
    warn_and_stop,
)
from .gopen import gopen, gopen_schemes  # noqa: F401
from .mix import RandomMix, RoundRobin  # noqa: F401
from .pipeline import DataPipeline, Loader  # noqa: F401
from .shardlists import (  # noqa: F401
    ResampledShards,
    SimpleShardList,
    non_empty,
    resampled,
    shardspec,
    single_node_only,
    split_by_node,
    split_by_worker,
)
from .tariterators import tarfile_samples, tarfile_to_samples  # noqa: F401
from .utils import PipelineStage, pytorch_worker_info, repeatedly  # noqa: F401
from .writers import ShardWriter, TarWriter  # noqa: F401
