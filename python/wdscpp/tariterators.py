"""Reading shards into samples: tarfile_samples over an iterator of {"url": ...} dicts, as
webdataset's, with the engine's reader (libarchive, every storage backend, errors naming URL and
member). In a DataPipeline after a shard list the engine reads the whole list itself."""

from . import _wdscpp, utils
from .filters import _engine_handler, pipelinefilter, to_python
from .handlers import reraise_exception


def _file_filters(samples, select_files, rename_files):
    """select_files / rename_files on each member name (key + "." + field); a renamed member
    may move to another sample, as when webdataset renames before grouping."""
    current = None
    for sample in samples:
        key, url = sample["__key__"], sample.get("__url__")
        for field, value in sample.items():
            if field.startswith("__"):
                continue
            name = key + "." + field
            if rename_files:
                name = rename_files(name)
            if select_files is not None and not select_files(name):
                continue
            base, dot, ext = name.rpartition("/")[2].partition(".")
            if not dot or not base:
                continue  # no key and extension in the name: not a sample's member
            prefix = name[: len(name) - len(name.rpartition("/")[2])] + base
            if current is None or current["__key__"] != prefix:
                if current is not None:
                    yield current
                current = {"__key__": prefix, "__url__": url}
                if "__local_path__" in sample:
                    current["__local_path__"] = sample["__local_path__"]
            current[ext.lower()] = value
    if current is not None:
        yield current


def tarfile_samples(src, handler=reraise_exception, select_files=None, rename_files=None):
    """The samples of each shard src names ({"url": url} dicts or URLs), as dicts of bytes."""
    def samples():
        for item in src:
            url = item["url"] if isinstance(item, dict) else item
            ds = _wdscpp.WebDataset([url], rank=0, world_size=1, handler=_engine_handler(handler),
                                    allow_empty=True, allow_pipe=not utils.enforce_security)
            for sample in ds:
                yield to_python(sample)

    if select_files is None and rename_files is None:
        return samples()
    return _file_filters(samples(), select_files, rename_files)


# After a shard list in a DataPipeline, the engine reads the shards itself (pipeline.py).
tarfile_to_samples = pipelinefilter(tarfile_samples)
