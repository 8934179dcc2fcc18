"""webdataset's pipeline stages (webdataset.filters), each usable two ways.

    wds.DataPipeline(wds.SimpleShardList(urls), wds.split_by_worker, wds.tarfile_to_samples(),
                     wds.shuffle(1000), wds.decode("rgb8"), wds.to_tuple("jpg", "cls"),
                     wds.batched(64))

A stage such as shuffle(1000) is a Stage: called on any iterator it runs in Python, as
webdataset's does (the _shuffle, _batched, ... functions are those Python loops). A DataPipeline
that starts with a shard list and reads it with tarfile_to_samples() hands its stages to the C++
engine instead, in order, for as long as the engine has each one (Stage.engine); the first stage
it has not, and every stage after it, runs as Python on the engine's output. Python callables
given to map, select, map_dict and map_tuple see webdataset's items: dicts, numpy arrays.
"""

import builtins
import itertools
import os
import random
import re
import sys
import time
from fnmatch import fnmatch

import numpy as np

from . import _wdscpp
from .handlers import reraise_exception
from .utils import identity


class Stage:
    """One stage: f(src, *args, **kw) over any iterator; engine(ds) the same stage appended to a
    C++ Dataset, or None when the engine cannot run it with these arguments."""

    def __init__(self, f, args, kw, engine=None):
        self.f, self.args, self.kw, self._engine = f, args, kw, engine

    def __call__(self, src):
        return self.f(src, *self.args, **self.kw)

    def engine(self, ds, ctx):
        """ds with this stage appended, or None; ctx.torch: image tensors are torch's."""
        if self._engine is None:
            return None
        return self._engine(ds, ctx, *self.args, **self.kw)

    def __repr__(self):
        return f"{getattr(self.f, '__name__', self.f)}{self.args}{self.kw or ''}"


class _Curried:
    def __init__(self, f, engine=None):
        self.f, self._engine_fn = f, engine
        self.__doc__ = f.__doc__
        self.__name__ = getattr(f, "__name__", "stage").lstrip("_")

    def __call__(self, *args, **kw):
        return Stage(self.f, args, kw, self._engine_fn)


def pipelinefilter(f):
    """f(src, *args, **kw) as a stage factory: pipelinefilter(f)(*args, **kw) is a stage."""
    return _Curried(f)


# --- items crossing from the engine to Python ---


def to_python(item, torch_tensors=False):
    """An engine item as webdataset gives it: samples as dicts, tensors as numpy arrays (torch
    tensors for torch image specs), no copy of a tensor's memory."""
    if isinstance(item, _wdscpp.Tensor):
        if torch_tensors:
            import torch

            return torch.from_dlpack(item)
        return item.numpy()
    if isinstance(item, (_wdscpp.Sample, _wdscpp.DecodedSample)):
        # A field's list (a tenbin list of arrays) comes from the engine as a tuple.
        return {k: to_python(list(v) if isinstance(v, tuple) else v, torch_tensors)
                for k, v in item.items()}
    if isinstance(item, tuple):
        return tuple(to_python(x, torch_tensors) for x in item)
    if isinstance(item, list):
        return [to_python(x, torch_tensors) for x in item]
    if isinstance(item, dict):
        return {k: to_python(v, torch_tensors) for k, v in item.items()}
    return item


def _engine_handler(handler):
    """The engine's counterpart of a handler: its own for webdataset's five (same behaviour,
    no GIL), any other callable as it is."""
    from . import handlers

    for name in ("reraise_exception", "ignore_and_continue", "ignore_and_stop",
                 "warn_and_continue", "warn_and_stop"):
        if handler is getattr(handlers, name):
            return None if name == "reraise_exception" else getattr(_wdscpp, name)
    return handler


# --- the stages ---


def getfirst(a, keys, default=None, missing_is_error=True):
    """a[k] for the first of keys ("jpg;png" or a list) in a."""
    if isinstance(keys, str):
        keys = keys.split(";")
    for k in keys:
        if k in a:
            return a[k]
    if missing_is_error:
        raise ValueError(f"didn't find {keys} in {list(a.keys())}")
    return default


def compose(*fs):
    """One function applying fs left to right."""

    def composed(x):
        for f in fs:
            x = f(x)
        return x

    return composed


_END = object()


def _pick(buf, rng):
    k = rng.randrange(len(buf))
    item = buf[k]
    buf[k] = buf[-1]
    buf.pop()
    return item


def _shuffle(data, bufsize=1000, initial=100, rng=None, seed=None, handler=None):
    """Items in random order through a buffer of bufsize, first filled to initial."""
    if seed is not None:
        rng = random.Random(seed)
    elif rng is None:
        rng = random.Random(int((os.getpid() + time.time()) * 1e9))
    initial = min(initial, bufsize)
    buf = []
    it = iter(data)
    for item in it:
        buf.append(item)
        if len(buf) < bufsize:
            # Two in, one out: the buffer grows to bufsize while items flow from the start.
            more = next(it, _END)
            if more is not _END:
                buf.append(more)
        if len(buf) >= initial:
            yield _pick(buf, rng)
    while buf:
        yield _pick(buf, rng)


def _engine_shuffle(ds, ctx, bufsize=1000, initial=100, rng=None, seed=None, handler=None):
    if rng is not None or bufsize < 1:
        return None
    return ds.shuffle(bufsize, min(initial, bufsize))


shuffle = _Curried(_shuffle, _engine_shuffle)


class detshuffle:
    """A shuffle whose order follows (seed, epoch): the same on every run, another each pass."""

    def __init__(self, bufsize=1000, initial=100, seed=0, epoch=-1):
        self.bufsize, self.initial, self.seed, self.epoch = bufsize, initial, seed, epoch

    def __call__(self, src):
        return self.run(src)

    def run(self, src):
        self.epoch += 1
        return _shuffle(src, self.bufsize, self.initial, random.Random(self.seed + self.epoch))

    def engine(self, ds, ctx):
        # The engine's shuffles are deterministic already, from the pipeline's seed and epoch.
        return ds.shuffle(self.bufsize, min(self.initial, self.bufsize)) if self.bufsize > 0 else None


def _select(data, predicate):
    for item in data:
        if predicate(item):
            yield item


def _engine_select(ds, ctx, predicate):
    torch_tensors = ctx.torch
    return ds.select(lambda item: bool(predicate(to_python(item, torch_tensors))))


select = _Curried(_select, _engine_select)


def _rsample(data, p=0.5):
    """Each item kept with probability p."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"rsample: p={p} is not a probability")
    for item in data:
        if random.uniform(0.0, 1.0) < p:
            yield item


rsample = pipelinefilter(_rsample)


def _decode(data, *args, handler=reraise_exception, **kw):
    from .autodecode import Decoder, imagehandler

    if set(kw) & _ENGINE_OPTIONS:
        raise ValueError(f"decode({', '.join(sorted(set(kw) & _ENGINE_OPTIONS))}=...): the "
                         "engine's image, audio and video options work where the engine "
                         "decodes: after the shard reader and the engine's stages (shuffle, "
                         "rename, ...)")
    for media in ("audio", "video"):
        if media in args:
            raise ValueError(f"decode('{media}'): {media} decodes in the engine only: right after "
                             "the shard reader and the engine's stages, with image specs of the "
                             "engine")
    decoder = Decoder([imagehandler(a) if isinstance(a, str) else a for a in args], **kw)
    return _map(data, decoder, handler=handler)


# The image specs the engine decodes itself; PIL's ("pil", ...) and callables are Python's.
_ENGINE_SPECS = {"l8", "rgb8", "rgba8", "l", "rgb", "rgba", "torchl8", "torchrgb8",
                 "torchrgba8", "torchl", "torchrgb", "torch", "torchrgba"}


# wdscpp's decode keywords for the engine's image decoder (_wdscpp.Dataset.decode).
_IMAGE_OPTIONS = {"resize", "crop", "random_resized_crop", "scale", "ratio", "flip", "normalize",
                  "layout", "dtype", "full_decode"}
# And for its audio decoder ("audio": flac wav mp3 ogg opus m4a fields, with FFmpeg).
_AUDIO_OPTIONS = {"audio_rate", "audio_channels", "audio_duration", "audio_offset", "audio_random",
                  "audio_max_duration", "audio_pad"}
# And for its video decoder ("video": mp4 webm mkv avi mov fields, with FFmpeg).
_VIDEO_OPTIONS = {"video_frames", "video_fps", "video_stride", "video_size", "video_offset",
                  "video_random", "video_threads", "video_max_duration", "video_max_frames"}
_ENGINE_OPTIONS = _IMAGE_OPTIONS | _AUDIO_OPTIONS | _VIDEO_OPTIONS


def _engine_decode(ds, ctx, *args, handler=reraise_exception, only=None, partial=False, **kw):
    if set(kw) - _ENGINE_OPTIONS or partial:
        return None
    if not all(isinstance(a, str) and (a in _ENGINE_SPECS or a in ("audio", "video"))
               for a in args):
        if kw:
            raise ValueError(f"decode({', '.join(sorted(kw))}=...): the engine's image options "
                             "take its image specs only (rgb8, torchrgb, ...), not callables or "
                             "PIL's specs")
        return None
    if len([a for a in args if a not in ("audio", "video")]) > 1:
        return None  # webdataset tries each spec in turn; the engine takes one per image
    if ds.item_kind not in ("sample", "decoded"):
        return None
    if isinstance(only, str):
        only = only.split()
    from .autodecode import PYTHON_DECODED, decode_python_field

    ctx.torch = ctx.torch or any(a.startswith("torch") for a in args)
    return ds.decode(*args, handler=_engine_handler(handler), only=list(only or []),
                     python_fields=(PYTHON_DECODED, decode_python_field), **kw)


decode = _Curried(_decode, _engine_decode)


def _map(data, f, handler=reraise_exception):
    for item in data:
        try:
            result = f(item)
        except Exception as exn:  # noqa: BLE001 - the handler decides
            if handler(exn):
                continue
            break
        if result is None:
            continue
        if isinstance(item, dict) and isinstance(result, dict):
            result["__key__"] = item.get("__key__")
        yield result


def _engine_map(ds, ctx, f, handler=reraise_exception):
    torch_tensors = ctx.torch

    def call(item):
        item = to_python(item, torch_tensors)
        result = f(item)
        if isinstance(item, dict) and isinstance(result, dict):
            result["__key__"] = item.get("__key__")
        return result

    return ds.map(call, handler=_engine_handler(handler))


map = _Curried(_map, _engine_map)


def _rename(data, handler=reraise_exception, keep=True, **kw):
    for sample in data:
        try:
            if not keep:
                yield {k: getfirst(sample, v) for k, v in kw.items()}
            else:
                old = {x for v in kw.values() for x in (v.split(";") if isinstance(v, str) else v)}
                result = {k: v for k, v in sample.items() if k not in old}
                result.update({k: getfirst(sample, v) for k, v in kw.items()})
                yield result
        except Exception as exn:  # noqa: BLE001 - the handler decides
            if handler(exn):
                continue
            break


def _engine_rename(ds, ctx, handler=reraise_exception, keep=True, **kw):
    if ds.item_kind not in ("sample", "decoded") or not all(isinstance(v, str) for v in kw.values()):
        return None
    return ds.rename(keep=keep, handler=_engine_handler(handler), **kw)


rename = _Curried(_rename, _engine_rename)


def _map_dict(data, handler=reraise_exception, **kw):
    if not kw:
        raise ValueError("map_dict() needs field=function arguments")
    for sample in data:
        try:
            for k, f in kw.items():
                sample[k] = f(sample[k])
        except Exception as exn:  # noqa: BLE001 - the handler decides
            if handler(exn):
                continue
            break
        yield sample


def _engine_map_dict(ds, ctx, handler=reraise_exception, **kw):
    def apply(sample):
        for k, f in kw.items():
            sample[k] = f(sample[k])
        return sample

    return _engine_map(ds, ctx, apply, handler=handler)


map_dict = _Curried(_map_dict, _engine_map_dict)


def _to_tuple(data, *args, handler=reraise_exception, missing_is_error=True, none_is_error=None):
    if none_is_error is None:
        none_is_error = missing_is_error
    if len(args) == 1 and isinstance(args[0], str) and " " in args[0]:
        args = args[0].split()
    for sample in data:
        try:
            result = tuple(getfirst(sample, f, missing_is_error=missing_is_error) for f in args)
            if none_is_error and any(x is None for x in result):
                raise ValueError(f"to_tuple {args} got {list(sample.keys())}")
            yield result
        except Exception as exn:  # noqa: BLE001 - the handler decides
            if handler(exn):
                continue
            break


def _engine_to_tuple(ds, ctx, *args, handler=reraise_exception, missing_is_error=True,
                     none_is_error=None):
    if ds.item_kind not in ("sample", "decoded") or not missing_is_error:
        return None
    if len(args) == 1 and isinstance(args[0], str) and " " in args[0]:
        args = args[0].split()
    return ds.to_tuple(*args, handler=_engine_handler(handler))


to_tuple = _Curried(_to_tuple, _engine_to_tuple)


def _map_tuple(data, *args, handler=reraise_exception):
    fs = [f if f is not None else identity for f in args]
    for item in data:
        item = list(item)
        try:
            for i in range(min(len(fs), len(item))):
                item[i] = fs[i](item[i])
        except Exception as exn:  # noqa: BLE001 - the handler decides
            if handler(exn):
                continue
            break
        yield tuple(item)


def _engine_map_tuple(ds, ctx, *args, handler=reraise_exception):
    fs = [f if f is not None else identity for f in args]

    def apply(item):
        item = list(item)
        for i in range(min(len(fs), len(item))):
            item[i] = fs[i](item[i])
        return tuple(item)

    return _engine_map(ds, ctx, apply, handler=handler)


map_tuple = _Curried(_map_tuple, _engine_map_tuple)


def combine_values(b, combine_tensors=True, combine_scalars=True):
    """One batch column: numbers as a numpy array, arrays and torch tensors stacked, else a list."""
    first = b[0]
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        return np.array(list(b)) if combine_scalars else list(b)
    if isinstance(first, np.ndarray):
        if not combine_tensors:
            return list(b)
        if len({x.shape for x in b}) != 1:
            raise ValueError(f"all shapes must be equal in collation, got {set(x.shape for x in b)}")
        return np.stack(list(b))
    if type(first).__module__ == "torch" and type(first).__name__ == "Tensor":
        if not combine_tensors:
            return list(b)
        import torch

        if len({tuple(x.shape) for x in b}) != 1:
            raise ValueError("all shapes must be equal in collation")
        return torch.stack(list(b))
    return list(b)


def default_collation_fn(samples, combine_tensors=True, combine_scalars=True):
    """A batch of tuples as a tuple of columns, of dicts as a dict of columns (combine_values)."""
    if not samples:
        raise ValueError("default_collation_fn: an empty batch")
    if isinstance(samples[0], (list, tuple)):
        return tuple(combine_values([s[i] for s in samples], combine_tensors, combine_scalars)
                     for i in range(len(samples[0])))
    keys = set(samples[0].keys())
    for s in samples[1:]:
        if set(s.keys()) != keys:
            raise ValueError("keys don't match in different samples")
    return {k: combine_values([s[k] for s in samples], combine_tensors, combine_scalars)
            for k in keys}


def _batched(data, batchsize=20, collation_fn=default_collation_fn, partial=True):
    batch = []
    for item in data:
        batch.append(item)
        if len(batch) == batchsize:
            yield collation_fn(batch) if collation_fn is not None else batch
            batch = []
    if batch and partial:
        yield collation_fn(batch) if collation_fn is not None else batch


def _engine_batched(ds, ctx, batchsize=20, collation_fn=default_collation_fn, partial=True):
    kind = ds.item_kind
    if collation_fn is default_collation_fn and kind in ("tuple", "decoded"):
        return ds.batched(batchsize, partial=partial)  # collated in C++
    if kind == "sample":
        return None
    torch_tensors = ctx.torch
    if collation_fn is None:
        collate = lambda items: [to_python(x, torch_tensors) for x in items]  # noqa: E731
    else:
        collate = lambda items: collation_fn([to_python(x, torch_tensors) for x in items])  # noqa: E731
    return ds.batched(batchsize, collation_fn=collate, partial=partial)


batched = _Curried(_batched, _engine_batched)


def _unlisted(data):
    for batch in data:
        yield from batch


unlisted = pipelinefilter(_unlisted)


def _unbatched(data):
    for batch in data:
        if isinstance(batch, (list, tuple)):
            for i in range(len(batch[0])):
                yield tuple(column[i] for column in batch)
        elif isinstance(batch, dict):
            lengths = {len(v) for v in batch.values()}
            if len(lengths) != 1:
                raise ValueError(f"unbatched: columns of different lengths {lengths}")
            for i in range(lengths.pop()):
                yield {k: v[i] for k, v in batch.items()}
        else:
            raise ValueError(f"unbatched: unknown batch type {type(batch)}")


def _engine_unbatched(ds, ctx):
    return ds.unbatched() if ds.item_kind in ("tuple", "decoded") else None


unbatched = _Curried(_unbatched, _engine_unbatched)


def _engine_slice(ds, ctx, *args):
    s = builtins.slice(*args)
    return ds.slice(s.start or 0, s.stop, s.step or 1)


slice_ = _Curried(itertools.islice, _engine_slice)
slice_.__name__ = "slice"


def _info(data, fmt=None, n=3, every=-1, width=50, stream=sys.stderr, name=""):
    for i, item in enumerate(data):
        if i < n or (every > 0 and (i + 1) % every == 0):
            text = fmt.format(**item) if fmt else repr(item)[:width]
            print(name, i, text, file=stream)
        yield item


info = pipelinefilter(_info)


def _log_keys(data, logfile=None):
    stream = open(logfile, "a") if logfile else None  # noqa: SIM115 - closed below
    try:
        for sample in data:
            if stream:
                print(sample.get("__url__"), sample.get("__key__"), file=stream, flush=True)
            yield sample
    finally:
        if stream:
            stream.close()


log_keys = pipelinefilter(_log_keys)


def _associate(data, associator, **kw):
    for sample in data:
        extra = associator(sample["__key__"]) if callable(associator) else associator.get(
            sample["__key__"], {})
        sample.update(extra)
        yield sample


associate = pipelinefilter(_associate)


def _extract_keys(source, *patterns, duplicate_is_error=True, ignore_missing=False):
    """Tuples of the fields matching each glob pattern ("*.jpg;*.png")."""
    for sample in source:
        result = []
        for pattern in patterns:
            alternatives = pattern.split(";") if isinstance(pattern, str) else pattern
            matches = [k for k in sample.keys()
                       if any(fnmatch("." + k, p) or fnmatch(k, p) for p in alternatives)]
            if not matches:
                if ignore_missing:
                    continue
                raise ValueError(f"Cannot find {pattern} in sample keys {list(sample.keys())}.")
            if len(matches) > 1 and duplicate_is_error:
                raise ValueError(f"Multiple sample keys {list(sample.keys())} match {pattern}.")
            result.append(sample[matches[0]])
        yield tuple(result)


extract_keys = pipelinefilter(_extract_keys)


def _rename_keys(source, *args, keep_unselected=False, must_match=True, duplicate_is_error=True,
                 **kw):
    """Fields renamed by glob patterns: rename_keys(image="*.jpg") or ("image", "*.jpg")."""
    renamings = [(pattern, new) for new, pattern in args] + [(p, n) for n, p in kw.items()]
    for sample in source:
        out = {}
        matched = {p: False for p, _ in renamings}
        for path, value in sample.items():
            name = re.sub(r".*/", "", path)
            new_name = None
            for pattern, new in reversed(renamings):  # the last renaming given wins
                if fnmatch(name.lower(), pattern):
                    matched[pattern] = True
                    new_name = new
                    break
            if new_name is None:
                if keep_unselected:
                    out[path] = value
                continue
            if new_name in out:
                if duplicate_is_error:
                    raise ValueError(f"Duplicate value in sample {list(sample.keys())} after rename.")
                continue
            out[new_name] = value
        if must_match and not all(matched.values()):
            raise ValueError(f"Not all patterns ({matched}) matched sample keys ({list(sample.keys())}).")
        yield out


rename_keys = pipelinefilter(_rename_keys)


def decode_bin(stream):
    return stream.read()


def decode_text(stream):
    return stream.read().decode("utf-8")


def decode_pickle(stream):
    import pickle

    return pickle.load(stream)


default_decoders = [("*.bin", decode_bin), ("*.txt", decode_text), ("*.pyd", decode_pickle)]


def find_decoder(decoders, path):
    name = re.sub(r".*/", "", path)
    if name.startswith("__"):
        return identity
    for pattern, f in reversed(decoders):
        if fnmatch(name.lower(), pattern) or fnmatch("." + name.lower(), pattern):
            return f
    return None


def _xdecode(source, *args, must_decode=True, defaults=default_decoders, **kw):
    """Fields decoded by glob pattern: xdecode(("*.custom", f)) or xdecode(custom=f); f gets a
    binary stream."""
    import io

    decoders = list(defaults) + list(args) + [("*." + k, f) for k, f in kw.items()]
    for sample in source:
        out = {}
        for path, data in sample.items():
            if path.startswith("__"):
                out[path] = data
                continue
            decoder = find_decoder(decoders, path)
            if decoder is False:
                out[path] = data
            elif decoder is None:
                if must_decode:
                    raise ValueError(f"No decoder found for {path}.")
                out[path] = data
            else:
                out[path] = decoder(io.BytesIO(data) if isinstance(data, bytes) else data)
        yield out


xdecode = pipelinefilter(_xdecode)


def transform_with(sample, transformers):
    """sample (a tuple) with element i replaced by transformers[i](element); None leaves it."""
    if not transformers:
        return sample
    result = list(sample)
    for i, f in enumerate(transformers):
        if f is not None:
            result[i] = f(sample[i])
    return result


class Cached:
    """Keeps the first pass's items in memory and replays them on later passes."""

    def __init__(self):
        self.cached = None

    def __call__(self, source):
        return self.run(source)

    def run(self, source):
        if self.cached is not None:
            yield from self.cached
            return
        items = []
        for item in source:
            items.append(item)
            yield item
        self.cached = items


__all__ = [
    "Cached", "Stage", "associate", "batched", "combine_values", "compose", "decode",
    "default_collation_fn", "detshuffle", "extract_keys", "getfirst", "identity", "info",
    "log_keys", "map", "map_dict", "map_tuple", "pipelinefilter", "rename", "rename_keys",
    "rsample", "select", "shuffle", "to_tuple", "transform_with", "unbatched", "unlisted",
    "xdecode",
]
slice = slice_  # noqa: A001 - webdataset's name, over the builtin in this module's namespace
