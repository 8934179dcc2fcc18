"""Writing shards: webdataset's TarWriter and ShardWriter, with its names, arguments and defaults.

    with wdscpp.ShardWriter("out/train-%06d.tar", maxcount=10000) as sink:
        for key, image, label in items:
            sink.write({"__key__": key, "jpg": image, "cls": label})  # image: HxWx3 uint8 array

Tar members are written by the C++ writer (wds/tar_writer.hpp) to a path or URL (s3://,
http(s)://, pipe: with WDS_ALLOW_PIPE=1: wds/sink.hpp) or to a Python object with write(). The
default encoder is webdataset's: bytes as they are, str as UTF-8, cls-like fields as str(x), json
as json.dumps(x), pyd/pickle as pickle, pth as torch.save; in C++ (wds/encode.hpp): NumPy arrays
(and PIL images) as npy or images by extension (img and image as JPEG, as webdataset), mp/msgpack/
msg as MessagePack and cbor as CBOR (None, bool, int, float, str, bytes, lists and str-keyed
dicts), ten/tenbin/tb as tenbin (an array or a list of arrays), npz as an .npz of a dict of
arrays (stored, not deflated: numpy.load reads both); a trailing .gz (or .xz, .bz2, .zst)
compresses the encoded bytes.
"""

import io
import json
import pickle
import sys

from . import utils
from ._wdscpp import _TarWriter

__all__ = ["TarWriter", "ShardWriter"]

_COMPRESSIONS = ("gz", "xz", "bz2", "zst")


def _torch_save(x):
    import torch

    out = io.BytesIO()
    torch.save(x, out)
    return out.getvalue()


def _json(x):
    return json.dumps(x).encode("utf-8")


def _decimal(x):
    return str(x).encode("ascii")


# The encoders of Python values that have no C++ counterpart (or whose bytes webdataset's
# Python makes: str(x), json.dumps), by last extension. Everything else is encoded in C++.
_PYTHON_ENCODERS = {
    **dict.fromkeys("cls cls2 class count index inx id".split(), _decimal),
    **dict.fromkeys("json jsn".split(), _json),
    **dict.fromkeys("pyd pickle".split(), pickle.dumps),
    "pth": _torch_save,
}
# How _TarWriter converts the values of these extensions (its kinds=): a document for msgpack
# and CBOR, a list of arrays for tenbin, a dict of arrays for npz.
_KINDS = {
    **dict.fromkeys("mp msgpack msg cbor".split(), "document"),
    **dict.fromkeys("ten tenbin tb".split(), "tensors"),
    "npz": "arrays",
}
# Extensions webdataset encodes as another's format: images named img or image are JPEG.
_ENCODE_AS = {"img": "jpg", "image": "jpg"}

_BYTES = (bytes, bytearray, memoryview)


def _last_extension(field):
    """The extension that chooses the encoding: after a compression suffix, lower case."""
    parts = field.split(".")
    if len(parts) > 1 and parts[-1] in _COMPRESSIONS:
        parts.pop()
    return parts[-1].lower()


def _array(value):
    """value as a NumPy array if it is array-like (an array, a NumPy scalar, a PIL image, a CPU
    torch.Tensor), else None."""
    # PIL.Image, not PIL: the package may be imported without its Image module.
    if "PIL.Image" in sys.modules and isinstance(value, sys.modules["PIL.Image"].Image):
        import numpy as np

        return np.asarray(value)
    import numpy as np

    if isinstance(value, (np.ndarray, np.generic)):
        return np.asarray(value)
    if hasattr(value, "__array__") and hasattr(value, "shape"):  # a CPU torch.Tensor
        return np.asarray(value)
    return None


def _to_native(field, value):
    """A value for the C++ encoder: bytes, str, int, float or a NumPy array."""
    if isinstance(value, (_BYTES, str, float)) or type(value) is int:
        return value
    array = _array(value)
    if array is not None:
        return array
    raise ValueError(
        f"no handler found for {_last_extension(field)} (field {field!r}, a {type(value).__name__})"
    )


def _array_or_value(value):
    """value as a NumPy array if it is array-like, else itself, for the C++ encoder to refuse
    naming the field."""
    array = _array(value)
    return value if array is None else array


def _arrays_of(value):
    """The arrays of a tenbin (an array or a list of them) or npz (a dict of them) value."""
    if isinstance(value, dict):
        return {k: _array_or_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_array_or_value(v) for v in value]
    return _array_or_value(value)


def _encode_sample(sample, encode_field):
    """The sample with each field other than metadata (names starting "_", which must hold
    str, as webdataset requires) replaced by encode_field(name, value)."""
    out = {}
    for k, v in sample.items():
        if k.startswith("_"):
            if not isinstance(v, str):
                raise ValueError("the values of metadata must be of string type")
            out[k] = v
        else:
            out[k] = encode_field(k, v)
    return out


def _encode_default_field(k, v):
    """webdataset's default encoding of one field, as far as Python does it: the value for
    _TarWriter.write(encode=True), which encodes the rest and compresses (.gz, ...) in C++."""
    if isinstance(v, (_BYTES, str)):
        return v
    ext = _last_extension(k)
    if ext in _PYTHON_ENCODERS:
        return _PYTHON_ENCODERS[ext](v)
    kind = _KINDS.get(ext)
    if kind == "document":
        return v  # the C++ conversion names the field and what it cannot hold
    if kind is not None:
        return _arrays_of(v)
    return _to_native(k, v)


def _encoded_name(field):
    """The name whose extension chooses the C++ encoding of `field`, if not its own."""
    ext = _last_extension(field)
    if ext not in _ENCODE_AS:
        return None
    parts = field.split(".")
    at = len(parts) - (2 if len(parts) > 1 and parts[-1] in _COMPRESSIONS else 1)
    parts[at] = _ENCODE_AS[ext]
    return ".".join(parts)


def _encode_default(sample):
    return _encode_sample(sample, _encode_default_field)


def _encode_with(handlers):
    """webdataset's encoder for a dict of extension -> function: a value not bytes or str goes
    through the function of its last extension; a trailing .gz gzips the result."""
    import gzip

    def encode_field(k, v):
        name = k[:-3] if k.endswith(".gz") else k
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif not isinstance(v, _BYTES):
            ext = name.rsplit(".", 1)[-1].lower()
            if ext not in handlers:
                raise ValueError(f"no handler found for {ext}")
            v = handlers[ext](v)
        return gzip.compress(v) if name != k else v

    return lambda sample: _encode_sample(sample, encode_field)


def _tar_format(format):
    if format is None:
        return "ustar"
    names = {"USTAR_FORMAT": "ustar", "PAX_FORMAT": "pax", "GNU_FORMAT": "gnu"}
    if isinstance(format, str) and format in names:
        return names[format]
    import tarfile

    for name, ours in names.items():
        if format == getattr(tarfile, name):
            return ours
    raise ValueError(f"TarWriter: format {format!r}: only USTAR_FORMAT, PAX_FORMAT and GNU_FORMAT")


def _compression(fileobj, compress):
    """tarfile's mode as webdataset chooses it: by compress=, else by the name's ending."""
    named = fileobj if isinstance(fileobj, str) else ""
    if compress is False:
        return "none"
    if compress is True or compress == "gz" or named.endswith("gz"):
        return "gzip"
    if compress == "bz2" or named.endswith("bz2"):
        return "bzip2"
    if compress == "xz" or named.endswith("xz"):
        return "xz"
    if compress in ("zst", "zstd") or named.endswith("zst"):
        return "zstd"
    return "none"


class TarWriter:
    """Writes samples (dicts with "__key__") to a tar file, one member "<key>.<field>" per field,
    fields in sorted order (webdataset.TarWriter).

    fileobj: a path or URL (s3://, http(s)://, pipe:CMD unless utils.enforce_security, "-" for
    stdout),
    written under a temporary name and renamed (uploaded) by close(); or an object with write(),
    which close() leaves open. encoder: True (by extension, see the module), False or None (values
    must be bytes), a dict extension -> function, or a function of the whole sample returning
    a dict of bytes. compress: None (by the name's ending: .gz, .bz2, .xz, .zst), False, True or
    "gz", "bz2", "xz", "zst". keep_meta: write "_" fields other than __key__ too. mtime: the
    members' time (default: now). format: None (USTAR), "PAX_FORMAT", "GNU_FORMAT" (or tarfile's
    constants). user and group are accepted for compatibility; members carry uid/gid 0 and no
    user or group names.

    A writer dropped without close() leaves nothing behind (a file is not renamed into place).
    """

    def __init__(
        self,
        fileobj,
        user="bigdata",
        group="bigdata",
        mode=0o444,
        compress=None,
        encoder=True,
        keep_meta=False,
        mtime=None,
        format=None,
    ):
        if encoder is True:
            self._encode, self._native = _encode_default, True
        elif encoder is False or encoder is None:
            self._encode, self._native = None, False
        elif isinstance(encoder, dict):
            self._encode, self._native = _encode_with(encoder), False
        elif callable(encoder):
            self._encode, self._native = encoder, False
        else:
            raise ValueError(f"{encoder}: unknown decoder spec")
        self.keep_meta = keep_meta
        self.user, self.group, self.mode = user, group, mode
        self.mtime, self.compress = mtime, compress
        self._w = _TarWriter(
            fileobj,
            compression=_compression(fileobj, compress),
            format=_tar_format(format),
            mode=mode,
            mtime=None if mtime is None else int(mtime),
            # pipe:CMD as webdataset runs it, unless its enforce_security (WDS_SECURE=1) is on.
            allow_pipe=not utils.enforce_security,
        )

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()

    def close(self):
        """Finishes the archive: renames the file into place or uploads it."""
        self._w.close()

    def write(self, obj):
        """Writes one sample; returns the bytes of its members' contents."""
        if self._encode is not None:
            obj = self._encode(obj)
        if "__key__" not in obj:
            raise ValueError("object must contain a __key__")
        key = obj["__key__"]
        fields, kinds, encode_as = [], {}, {}
        for k in sorted(obj.keys()):
            if k == "__key__" or (k.startswith("_") and not self.keep_meta):
                continue
            v = obj[k]
            if not self._native and not k.startswith("_") and not isinstance(v, _BYTES):
                raise ValueError(f"{k} doesn't map to a bytes after encoding ({type(v)})")
            if isinstance(v, str) and not self._native:
                v = v.encode("utf-8")  # metadata kept by keep_meta
            fields.append((k, v))
            if self._native and not k.startswith("_") and not isinstance(v, (_BYTES, str)):
                if _last_extension(k) in _KINDS:
                    kinds[k] = _KINDS[_last_extension(k)]
                name = _encoded_name(k)
                if name is not None:
                    encode_as[k] = name
        return self._w.write(key, fields, encode=self._native, kinds=kinds, encode_as=encode_as)


class ShardWriter:
    """Writes samples into numbered shards (webdataset.ShardWriter): pattern % shard gives each
    name ("out-%06d.tar"); a new shard is begun before a write when the current one holds
    maxcount samples or maxsize bytes of contents. The first shard is opened at once.

    post(fname) runs after each shard is closed; opener(fname) returns the file object to write a
    shard to (default: the name, as TarWriter opens it); verbose prints each shard's name on
    stderr as it opens. Other keywords go to TarWriter.
    """

    def __init__(
        self,
        pattern,
        maxcount=100000,
        maxsize=3e9,
        post=None,
        start_shard=0,
        verbose=1,
        opener=None,
        **kw,
    ):
        self.verbose = verbose
        self.kw = kw
        self.maxcount = maxcount
        self.maxsize = maxsize
        self.post = post
        self.tarstream = None
        self.shard = start_shard
        self.pattern = pattern
        self.total = 0
        self.count = 0
        self.size = 0
        self.fname = None
        self.opener = opener
        self._closed = False
        self.next_stream()

    def next_stream(self):
        """Closes the current shard and opens the next."""
        self.finish()
        self.fname = self.pattern % self.shard
        if self.verbose:
            print(
                "# writing", self.fname, self.count, "%.1f GB" % (self.size / 1e9), self.total,
                file=sys.stderr,
            )
        self.shard += 1
        dest = self.opener(self.fname) if self.opener else self.fname
        self.tarstream = TarWriter(dest, **self.kw)
        self.count = 0
        self.size = 0

    def write(self, obj):
        """Writes one sample, first beginning a new shard if the current one is full."""
        if self._closed:
            raise ValueError(f"ShardWriter({self.pattern!r}): write after close")
        if self.tarstream is None or self.count >= self.maxcount or self.size >= self.maxsize:
            self.next_stream()
        size = self.tarstream.write(obj)
        self.count += 1
        self.total += 1
        self.size += size

    def finish(self):
        """Closes the current shard and calls post with its name."""
        if self.tarstream is not None:
            self.tarstream.close()
            if callable(self.post):
                self.post(self.fname)
            self.tarstream = None

    def close(self):
        """Closes the last shard; further writes are errors (webdataset's fail too)."""
        self.finish()
        self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *args, **kw):
        self.close()
