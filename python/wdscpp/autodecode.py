"""Decoding samples: webdataset's autodecode (Decoder, handlers, image specs) on wds's codecs.

    import wdscpp as wds
    from wdscpp.autodecode import Decoder, handle_extension, imagehandler

    decode = Decoder([imagehandler("rgb8"), handle_extension("seg.png", read_mask)])
    sample = decode({"__key__": "a", "jpg": jpeg_bytes, "seg.png": mask_bytes, "cls": b"7"})
    # sample["jpg"]: HxWx3 uint8 ndarray; sample["seg.png"]: read_mask(mask_bytes); sample["cls"]: 7

The names, arguments and semantics are webdataset 1.0's: a handler is f(key, data) with key
"." + field name, returning None to let the next one try or Continue(key, data) to go on with
new ones; each field goes through pre (gzfilter) + handlers + post (basichandlers); what no
handler takes stays bytes. The formats wds decodes in C++ are decoded there, by the same code as
WebDataset.decode(): the basic fields (txt, cls, json, npy, npz, mp msg msgpack, cbor, ten tb,
...) and images under numpy and torch specs, to what webdataset gives (dicts and lists for
msgpack and cbor, a list of arrays for tenbin, a dict of arrays for npz), without the msgpack
or cbor packages. The rest is Python, as in webdataset: PIL specs, pickle, torch.load.

Differences from webdataset, on purpose:
  - Image specs decode the fields whose last extension is jpg jpeg png ppm pgm pbm pnm bmp webp
    tif or tiff (IMAGE_EXTENSIONS), as wds's decode() does, not every name PIL knows: a field
    named "rgb", "im" or "ps" stays bytes. Other extensions passed to ImageHandler go to PIL.
  - DecodingError's message names the shard URL, the member and the cause (webdataset's is empty).
  - A .gz field may decompress to at most MAX_DECOMPRESSED_SIZE bytes, as in decode().
  - msgpack and cbor maps need str keys, their strings UTF-8, nesting at most 512 levels; CBOR
    tags are refused; msgpack ext values are bytes (msgpack.unpackb gives ExtType).

Thread safety: handlers and Decoder keep no state between calls; all of them pickle (DataLoader
workers get copies) when the user's functions do.
"""

import gzip
import io
import os
import pickle
import sys
import tempfile

from . import _wdscpp
from .tenbin import tenbin_loads

__all__ = [
    "PYTHON_DECODED",
    "decode_python_field",
    "tenbin_loads",
    "Continue",
    "Decoder",
    "DecodingError",
    "IMAGE_EXTENSIONS",
    "ImageHandler",
    "MAX_DECOMPRESSED_SIZE",
    "basichandlers",
    "call_extension_handler",
    "cbor_loads",
    "decoders",
    "default_decoder",
    "default_post_handlers",
    "default_pre_handlers",
    "gzfilter",
    "handle_extension",
    "imagehandler",
    "imagespecs",
    "msgpack_loads",
    "npy_loads",
    "npz_loads",
    "pytorch_weights_only",
    "torch_audio",
    "torch_loads",
    "torch_video",
    "unpickle_loads",
]

# webdataset's switches, read from the same environment variables.
pytorch_weights_only = os.environ.get("WDS_PYTORCH_WEIGHTS_ONLY", "0") == "1"
# The image extensions wds's decode() reads (codecs/, OpenCV): one list for both decoders.
IMAGE_EXTENSIONS = ["jpg", "jpeg", "png", "ppm", "pgm", "pbm", "pnm", "bmp", "webp", "tif", "tiff"]
_CPP_IMAGE_EXTENSIONS = frozenset(IMAGE_EXTENSIONS)

# As DecodeOptions::max_decompressed_size: a small field must not expand into all of memory.
MAX_DECOMPRESSED_SIZE = 1 << 30


def _security_enforced():
    # webdataset keeps the flag in its utils module, where its users and tests set it.
    from . import utils

    return bool(utils.enforce_security)


################################################################
# Basic formats
################################################################


def _as_bytes(data):
    return data if isinstance(data, bytes) else bytes(data)


def _native(value):
    # npy arrives as a wds Tensor, tenbin as a list and npz as a dict of them; webdataset gives
    # numpy arrays (numpy() shares the memory).
    if isinstance(value, _wdscpp.Tensor):
        return value.numpy()
    if isinstance(value, list):
        return [_native(v) for v in value]
    if isinstance(value, dict):
        return {k: _native(v) for k, v in value.items()}
    return value


class _BasicCpp:
    """The C++ basic decoder for one extension, as a picklable function of the bytes."""

    def __init__(self, extension):
        self.extension = extension

    def __call__(self, data):
        value = _wdscpp._decode_field(self.extension, _as_bytes(data))
        if value is None:  # cannot happen for the extensions of the table below
            raise ValueError(f"{self.extension}: no basic decoder in wds")
        return _native(value)

    def __repr__(self):
        return f"<wds basic decoder {self.extension}>"


def unpickle_loads(data):
    """Unpickles data; refused when security is enforced (WDS_SECURE=1): pickle runs code."""
    if _security_enforced():
        raise ValueError(
            "Unpickling is not allowed for security reasons when enforce_security is set."
        )
    return pickle.loads(data)


def torch_loads(data):
    """torch.load of data on the CPU, weights only if WDS_PYTORCH_WEIGHTS_ONLY=1; refused when
    security is enforced."""
    if _security_enforced():
        raise ValueError(
            "torch.loads is not allowed for security reasons when enforce_security is set."
        )
    import torch

    return torch.load(io.BytesIO(data), weights_only=pytorch_weights_only, map_location="cpu")


def npy_loads(data):
    """A NumPy array from .npy bytes (wds's C++ npy reader)."""
    return _BasicCpp("npy")(data)


def npz_loads(data):
    """A dict of NumPy arrays from .npz bytes (wds's C++ reader; it never unpickles)."""
    return _BasicCpp("npz")(data)


def msgpack_loads(data):
    """A value from msgpack bytes (wds's C++ reader: dicts, lists, str, bytes, numbers)."""
    return _BasicCpp("mp")(data)


def cbor_loads(data):
    """A value from CBOR bytes (wds's C++ reader)."""
    return _BasicCpp("cbor")(data)


# webdataset's table: the text after a field's last dot -> a function of the bytes. Missing
# extensions stay bytes.
decoders = {
    **{ext: _BasicCpp(ext) for ext in "txt text transcript cls cls2 index inx id json jsn".split()},
    "npy": npy_loads,
    "npz": npz_loads,
    "pkl": unpickle_loads,
    "pickle": unpickle_loads,
    "pyd": unpickle_loads,
    "pth": torch_loads,
    "mp": msgpack_loads,
    "msg": msgpack_loads,
    "cbor": cbor_loads,
    "ten": _BasicCpp("ten"),
    "tb": _BasicCpp("tb"),
}


# The table's extensions decoded in Python (the engine's decode() hands them over); the others
# are the engine's own.
PYTHON_DECODED = ("pkl", "pickle", "pyd", "pth")


def decode_python_field(extension, data):
    """A field whose extension is one of PYTHON_DECODED, decoded as basichandlers does."""
    return decoders[extension](data)


def basichandlers(key, data):
    """Decodes by the text after the key's last dot with the `decoders` table (txt -> str,
    cls -> int, json, npy, pickle, pth, ...); None for other extensions. Case-sensitive, as
    webdataset's."""
    f = decoders.get(key.rsplit(".", 1)[-1])
    return None if f is None else f(data)


################################################################
# Handlers for chosen extensions
################################################################


def call_extension_handler(key, data, f, extensions):
    """f(data) if key ends with one of `extensions` (lists of lower-case dot-separated parts,
    or strings), else None."""
    parts = key.lower().split(".")
    for target in extensions:
        target = target.split(".") if isinstance(target, str) else target
        if len(target) <= len(parts) and parts[len(parts) - len(target) :] == target:
            return f(data)
    return None


class _ExtensionHandler:
    # A class rather than a closure so that decoders pickle into DataLoader workers.
    def __init__(self, extensions, f):
        self.extensions = [e.split(".") for e in extensions.lower().split()]
        self.f = f

    def __call__(self, key, data):
        return call_extension_handler(key, data, self.f, self.extensions)


def handle_extension(extensions, f):
    """A handler calling f(data) for fields ending in one of `extensions`, a space-separated
    list of whole dot-separated parts, case-insensitive: "jpg jpeg", or "seg.png" for x.seg.png
    only."""
    return _ExtensionHandler(extensions, f)


################################################################
# Images
################################################################

# spec -> (array type, element type, mode), webdataset's table.
imagespecs = {
    "l8": ("numpy", "uint8", "l"),
    "rgb8": ("numpy", "uint8", "rgb"),
    "rgba8": ("numpy", "uint8", "rgba"),
    "l": ("numpy", "float", "l"),
    "rgb": ("numpy", "float", "rgb"),
    "rgba": ("numpy", "float", "rgba"),
    "torchl8": ("torch", "uint8", "l"),
    "torchrgb8": ("torch", "uint8", "rgb"),
    "torchrgba8": ("torch", "uint8", "rgba"),
    "torchl": ("torch", "float", "l"),
    "torchrgb": ("torch", "float", "rgb"),
    "torch": ("torch", "float", "rgb"),
    "torchrgba": ("torch", "float", "rgba"),
    "pill": ("pil", None, "l"),
    "pil": ("pil", None, "rgb"),
    "pilrgb": ("pil", None, "rgb"),
    "pilrgba": ("pil", None, "rgba"),
}


def _pil_open(data, mode):
    import PIL.Image

    with io.BytesIO(data) as stream:
        image = PIL.Image.open(stream)
        image.load()
    return image.convert(mode.upper())


def _array_from_pil(image, atype, etype, mode):
    # For extensions outside IMAGE_EXTENSIONS that the user asked for: what the C++ gives, from PIL.
    import numpy as np

    array = np.asarray(image)
    if etype == "float":
        array = array.astype(np.float32) / np.float32(255)
    else:
        array = array.copy()  # writable, as the C++ decoder's arrays are
    if atype == "numpy":
        return array
    import torch

    if mode != "l":
        array = np.ascontiguousarray(array.transpose(2, 0, 1))
    return torch.from_numpy(array)


class ImageHandler:
    """Decodes images under an imagespec (a key of `imagespecs`):
    l8 rgb8 rgba8      numpy uint8, HxW / HxWx3 / HxWx4
    l rgb rgba         numpy float32 in [0, 1], the same shapes
    torchl8 torchrgb8 torchrgba8            torch uint8, HxW / 3xHxW / 4xHxW
    torchl torchrgb torch torchrgba         torch float32 in [0, 1], the same shapes
    pill pil pilrgb pilrgba                 PIL image in mode L / RGB / RGB / RGBA
    for fields whose last extension, lower-cased, is in `extensions`; None for the others.
    """

    def __init__(self, imagespec, extensions=IMAGE_EXTENSIONS):
        if imagespec not in imagespecs:
            raise ValueError("Unknown imagespec: %s" % imagespec)
        self.imagespec = imagespec
        self.extensions = {e.lower() for e in extensions}

    def __call__(self, key, data):
        extension = key.rsplit(".", 1)[-1].lower()
        if extension not in self.extensions:
            return None
        atype, etype, mode = imagespecs[self.imagespec]
        data = _as_bytes(data)
        if atype == "pil":
            return _pil_open(data, mode)
        if extension not in _CPP_IMAGE_EXTENSIONS:
            return _array_from_pil(_pil_open(data, mode), atype, etype, mode)
        tensor = _wdscpp._decode_field(extension, data, self.imagespec)
        if atype == "numpy":
            return tensor.numpy()
        import torch

        result = torch.from_dlpack(tensor)
        # wds's gray torch images are 1xHxW; webdataset's are HxW.
        return result.squeeze(0) if mode == "l" else result

    def __repr__(self):
        return f"ImageHandler({self.imagespec!r})"


def imagehandler(imagespec, extensions=IMAGE_EXTENSIONS):
    """ImageHandler(imagespec, extensions): the name decode() uses for spec strings."""
    return ImageHandler(imagespec, extensions)


################################################################
# Video and audio (torchvision, torchaudio: they read files)
################################################################


def _load_from_file(key, data, extensions, load):
    extension = key.rsplit(".", 1)[-1]
    if extension not in extensions:
        return None
    with tempfile.TemporaryDirectory() as dirname:
        fname = os.path.join(dirname, "file." + extension)
        with open(fname, "wb") as stream:
            stream.write(data)
        return load(fname)


def torch_video(key, data):
    """torchvision.io.read_video of mp4 ogv mjpeg avi mov h264 mpg webm wmv fields."""

    def load(fname):
        import torchvision.io

        return torchvision.io.read_video(fname, pts_unit="sec")

    return _load_from_file(key, data, "mp4 ogv mjpeg avi mov h264 mpg webm wmv".split(), load)


def torch_audio(key, data):
    """torchaudio.load of flac mp3 sox wav m4a ogg wma fields."""

    def load(fname):
        import torchaudio

        return torchaudio.load(fname)

    return _load_from_file(key, data, "flac mp3 sox wav m4a ogg wma".split(), load)


################################################################
# Decoding whole samples
################################################################


class Continue:
    """A handler's result meaning: go on to the next handler with this key and data (as
    gzfilter does after decompressing)."""

    def __init__(self, key, data):
        self.key, self.data = key, data


def gzfilter(key, data):
    """Decompresses a field ending in .gz and goes on with the rest of its name (txt.gz is
    decoded as txt, the result keeps the name txt.gz)."""
    if not key.endswith(".gz"):
        return None
    with gzip.GzipFile(fileobj=io.BytesIO(data)) as stream:
        decompressed = stream.read(MAX_DECOMPRESSED_SIZE + 1)
    if len(decompressed) > MAX_DECOMPRESSED_SIZE:
        raise ValueError(f"{key[1:]}: decompresses to more than {MAX_DECOMPRESSED_SIZE} bytes")
    return Continue(key[:-3], decompressed)


default_pre_handlers = [gzfilter]
default_post_handlers = [basichandlers]


class DecodingError(Exception):
    """A field of a sample could not be decoded. url, key: the sample's; k: the field; sample:
    the whole sample; the cause is __cause__."""

    def __init__(self, url=None, key=None, k=None, sample=None):
        super().__init__(url, key, k)
        self.url, self.key, self.k, self.sample = url, key, k, sample

    def __str__(self):
        # webdataset's message is empty; a log line should say where and why.
        where = f"{self.url}: " if self.url is not None else ""
        message = f"{where}{self.key}.{self.k}: cannot decode"
        if self.__cause__ is not None:
            message += f": {type(self.__cause__).__name__}: {self.__cause__}"
        return message


class Decoder:
    """Decodes samples (dicts): each field, except those starting with "__", goes through
    pre + handlers + post until one returns something other than None; what none takes stays.

    pre: default [gzfilter]; post: default [basichandlers]; only: field names (a list or a
    space-separated string) to decode, the others stay as they are; partial: keep fields that
    are not bytes (already decoded) instead of failing.
    """

    def __init__(self, handlers, pre=None, post=None, only=None, partial=False):
        assert isinstance(handlers, list), f"handlers = {handlers} must be a list"
        if isinstance(only, str):
            only = only.split()
        self.only = None if only is None else set(only)
        pre = default_pre_handlers if pre is None else pre
        post = default_post_handlers if post is None else post
        assert all(callable(h) for h in handlers), f"one of {handlers} not callable"
        assert all(callable(h) for h in pre), f"one of {pre} not callable"
        assert all(callable(h) for h in post), f"one of {post} not callable"
        self.handlers = list(pre) + handlers + list(post)
        self.partial = partial

    def decode1(self, key, data):
        """The value of one field named `key` (without the dot) from its bytes."""
        key = "." + key
        for f in self.handlers:
            result = f(key, data)
            if isinstance(result, Continue):
                key, data = result.key, result.data
                continue
            if result is not None:
                return result
        return data

    def decode(self, sample):
        """The decoded copy of `sample`; a field that fails raises DecodingError."""
        assert isinstance(sample, dict), sample
        result = {}
        for k, v in list(sample.items()):
            try:
                if k[:2] == "__":
                    if isinstance(v, bytes):
                        try:
                            v = v.decode("utf-8")
                        except UnicodeDecodeError:
                            print(f"Can't decode v of k = {k} as utf-8: v = {v}", file=sys.stderr)
                    result[k] = v
                elif self.only is not None and k not in self.only:
                    result[k] = v
                else:
                    assert v is not None, f"{k} is None"
                    if self.partial and not isinstance(v, bytes):
                        result[k] = v
                    else:
                        assert isinstance(v, bytes), f"k,v = {k}, {v}"
                        result[k] = self.decode1(k, v)
            except Exception as exn:
                raise DecodingError(
                    url=sample.get("__url__"), key=sample.get("__key__"), k=k, sample=sample
                ) from exn
        return result

    def __call__(self, sample):
        return self.decode(sample)


default_decoder = Decoder(default_pre_handlers + default_post_handlers)
