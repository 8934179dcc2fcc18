"""wdscpp.autodecode: webdataset's Decoder, handlers and image specs, on samples made in memory."""

import gzip
import io
import json
import pickle

import numpy as np
import PIL.Image
import pytest

from wdscpp import autodecode
from wdscpp.autodecode import (
    Continue,
    Decoder,
    DecodingError,
    ImageHandler,
    basichandlers,
    gzfilter,
    handle_extension,
    imagehandler,
    imagespecs,
)

H, W = 6, 10


def pixels():
    # Distinct values per channel and position, so a transposed or gray result cannot pass.
    y, x = np.mgrid[0:H, 0:W]
    return np.stack([y * 20, x * 20, 255 - x * 10], axis=2).astype(np.uint8)


def encode(array, fmt="PNG", mode=None):
    out = io.BytesIO()
    image = PIL.Image.fromarray(array)
    (image.convert(mode) if mode else image).save(out, fmt)
    return out.getvalue()


PNG = encode(pixels())


def sample(**fields):
    s = {"__key__": "k1", "__url__": "mem://shard-0.tar"}
    s.update(fields)
    return s


# Each numpy/torch spec: (layout, dtype name, channels); None channels: 2-D.
EXPECTED = {
    "l8": ("hwc", "uint8", None),
    "rgb8": ("hwc", "uint8", 3),
    "rgba8": ("hwc", "uint8", 4),
    "l": ("hwc", "float32", None),
    "rgb": ("hwc", "float32", 3),
    "rgba": ("hwc", "float32", 4),
    "torchl8": ("chw", "uint8", None),
    "torchrgb8": ("chw", "uint8", 3),
    "torchrgba8": ("chw", "uint8", 4),
    "torchl": ("chw", "float32", None),
    "torchrgb": ("chw", "float32", 3),
    "torch": ("chw", "float32", 3),
    "torchrgba": ("chw", "float32", 4),
}


def test_every_spec_is_known():
    assert set(imagespecs) == set(EXPECTED) | {"pil", "pill", "pilrgb", "pilrgba"}


@pytest.mark.parametrize("spec", sorted(EXPECTED))
def test_array_specs(spec):
    torch = pytest.importorskip("torch")
    layout, dtype, channels = EXPECTED[spec]
    out = Decoder([imagehandler(spec)])(sample(png=PNG))["png"]
    if layout == "chw":
        assert isinstance(out, torch.Tensor)
        assert str(out.dtype) == "torch." + dtype
        arr = out.numpy()
        shape = (H, W) if channels is None else (channels, H, W)
        if channels is not None:
            arr = arr.transpose(1, 2, 0)
    else:
        assert isinstance(out, np.ndarray)
        assert out.dtype == np.dtype(dtype)
        arr = out
        shape = (H, W) if channels is None else (H, W, channels)
    assert tuple(out.shape) == shape
    scale = 255.0 if dtype == "float32" else 1.0
    if dtype == "float32":
        assert 0.0 <= arr.min() and arr.max() <= 1.0
    if channels is not None:
        # The RGB channels are the pixels written (PNG is lossless), alpha opaque.
        assert np.allclose(arr[:, :, :3] * scale, pixels(), atol=1e-3)
        if channels == 4:
            assert np.allclose(arr[:, :, 3] * scale, 255)
    else:
        gray = np.asarray(PIL.Image.fromarray(pixels()).convert("L"), dtype=np.float32)
        assert np.abs(arr * scale - gray).max() <= 1.5  # rounding may differ by a level


@pytest.mark.parametrize(
    "spec,mode", [("pil", "RGB"), ("pilrgb", "RGB"), ("pill", "L"), ("pilrgba", "RGBA")]
)
def test_pil_specs(spec, mode):
    out = Decoder([imagehandler(spec)])(sample(png=PNG))["png"]
    assert isinstance(out, PIL.Image.Image)
    assert out.mode == mode and out.size == (W, H)
    if mode == "RGB":
        assert np.array_equal(np.asarray(out), pixels())


def test_unknown_spec_refused():
    for spec in ["bgr8", "RGB8", "png", ""]:
        with pytest.raises(ValueError, match="Unknown imagespec"):
            ImageHandler(spec)


def test_image_handler_extensions():
    h = imagehandler("rgb8")
    assert h(".txt", b"hello") is None
    # A field named like a PIL format but outside wds's image extensions stays bytes.
    assert h(".rgb", b"not an image") is None
    # The last extension decides, case-insensitively.
    assert h(".seg.PNG", PNG).shape == (H, W, 3)
    assert h(".jpg", encode(pixels(), "JPEG")).shape == (H, W, 3)
    # An extension asked for explicitly that the C++ decoder does not read goes through PIL.
    gif = encode(pixels(), "GIF")
    g = imagehandler("rgb8", extensions=["gif"])
    assert g(".png", PNG) is None
    out = g(".gif", gif)
    assert out.shape == (H, W, 3) and out.dtype == np.uint8
    assert imagehandler("rgb", extensions=["gif"])(".gif", gif).dtype == np.float32


def test_corrupt_image_is_a_decoding_error():
    with pytest.raises(DecodingError) as info:
        Decoder([imagehandler("rgb8")])(sample(png=b"\x89PNG broken"))
    assert info.value.k == "png"
    assert "mem://shard-0.tar" in str(info.value) and "k1.png" in str(info.value)


def test_basic_fields():
    arr = np.arange(12, dtype=np.int16).reshape(3, 4)
    npy = io.BytesIO()
    np.save(npy, arr)
    npz = io.BytesIO()
    np.savez(npz, a=arr, b=np.ones(2))
    out = Decoder([])(
        sample(
            txt="héllo".encode(),
            transcript=b"words",
            cls=b" 7\n",
            index=b"12",
            json=json.dumps({"a": [1, 2.5, None]}).encode(),
            npy=npy.getvalue(),
            npz=npz.getvalue(),
            pyd=pickle.dumps({"x": (1, 2)}),
            png=PNG,
            html=b"<p>",
            **{"class": b"3", "seg.txt": b"deep"},
        )
    )
    assert out["__key__"] == "k1" and out["__url__"] == "mem://shard-0.tar"
    assert out["txt"] == "héllo" and out["transcript"] == "words"
    assert out["cls"] == 7 and out["index"] == 12
    assert out["json"] == {"a": [1, 2.5, None]}
    assert isinstance(out["npy"], np.ndarray) and out["npy"].dtype == np.int16
    assert np.array_equal(out["npy"], arr)
    assert set(out["npz"]) == {"a", "b"} and np.array_equal(out["npz"]["a"], arr)
    assert out["pyd"] == {"x": (1, 2)}
    assert out["seg.txt"] == "deep"  # by the last extension
    # What no handler takes stays bytes: images without a spec, class (as webdataset), html.
    assert out["png"] == PNG and out["class"] == b"3" and out["html"] == b"<p>"


def test_basichandlers_is_case_sensitive_and_none_for_unknown():
    assert basichandlers(".txt", b"a") == "a"
    assert basichandlers(".TXT", b"a") is None
    assert basichandlers(".jpg", b"a") is None


def test_pth_and_security(monkeypatch):
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.save(torch.tensor([1, 2, 3]), buf)
    out = Decoder([])(sample(pth=buf.getvalue()))
    assert torch.equal(out["pth"], torch.tensor([1, 2, 3]))
    from wdscpp import utils

    monkeypatch.setattr(utils, "enforce_security", True)
    with pytest.raises(ValueError, match="torch.loads is not allowed"):
        autodecode.decoders["pth"](buf.getvalue())
    with pytest.raises(ValueError, match="Unpickling is not allowed"):
        autodecode.unpickle_loads(pickle.dumps(1))
    with pytest.raises(DecodingError):
        Decoder([])(sample(pyd=pickle.dumps(1)))


def test_handle_extension_matches_whole_parts():
    seen = []

    def f(data):
        seen.append(data)
        return "mask"

    h = handle_extension("seg.png", f)
    assert h(".seg.png", b"1") == "mask"
    assert h(".x.SEG.PNG", b"2") == "mask"
    assert h(".png", b"3") is None
    assert h(".xseg.png", b"4") is None
    assert seen == [b"1", b"2"]
    multi = handle_extension("jpg  jpeg", len)
    assert multi(".jpeg", b"abc") == 3 and multi(".jpg", b"ab") == 2 and multi(".png", b"a") is None


def test_user_handlers_run_before_basic_ones_and_in_order():
    out = Decoder(
        [
            handle_extension("seg.png", lambda data: "mask"),
            imagehandler("l8"),
            handle_extension("cls", lambda data: "mine"),
        ]
    )(sample(png=PNG, cls=b"1", **{"seg.png": PNG}))
    assert out["seg.png"] == "mask"
    assert out["png"].shape == (H, W)
    assert out["cls"] == "mine"


def test_handler_gets_dotted_field_name():
    keys = []

    def spy(key, data):
        keys.append(key)

    Decoder([spy])(sample(**{"seg.png": PNG, "txt": b"t"}))
    assert sorted(keys) == [".seg.png", ".txt"]


def test_only():
    s = sample(png=PNG, cls=b"4", txt=b"t")
    out = Decoder([imagehandler("rgb8")], only="cls txt")(s)
    assert out["png"] == PNG and out["cls"] == 4 and out["txt"] == "t"
    out = Decoder([imagehandler("rgb8")], only=["png"])(s)
    assert out["png"].shape == (H, W, 3) and out["cls"] == b"4"
    # Whole field names: "png" does not select "seg.png".
    out = Decoder([imagehandler("rgb8")], only=["png"])(sample(**{"seg.png": PNG}))
    assert out["seg.png"] == PNG


def test_partial():
    s = sample(cls=b"5", txt="already decoded")
    with pytest.raises(DecodingError) as info:
        Decoder([])(s)
    assert isinstance(info.value.__cause__, AssertionError) and info.value.k == "txt"
    out = Decoder([], partial=True)(s)
    assert out["cls"] == 5 and out["txt"] == "already decoded"
    with pytest.raises(DecodingError):
        Decoder([], partial=True)(sample(txt=None))


def test_metadata_fields_are_not_decoded():
    out = Decoder([lambda key, data: "decoded"])(
        {"__key__": b"k", "__url__": "u", "__extra__": b"\xff", "txt": b"x"}
    )
    assert out == {"__key__": "k", "__url__": "u", "__extra__": b"\xff", "txt": "decoded"}


def test_continue_passes_new_key_and_data_to_the_next_handler():
    def strip_rot(key, data):
        if key.endswith(".rot"):
            return Continue(key[: -len(".rot")], bytes(reversed(data)))

    out = Decoder([strip_rot])(sample(**{"txt.rot": b"olleh"}))
    assert out["txt.rot"] == "hello"
    # The handler before Continue is not called again.
    calls = []

    def once(key, data):
        calls.append(key)
        return Continue(key, data + b"!") if key == ".txt" else None

    assert Decoder([once])(sample(txt=b"a"))["txt"] == "a!"
    assert calls == [".txt"]


def test_gz():
    text = "hello gzip\n" * 50
    fields = {"txt.gz": gzip.compress(text.encode()), "cls.gz": gzip.compress(b"9")}
    out = Decoder([])(sample(**fields))
    assert out["txt.gz"] == text and out["cls.gz"] == 9
    c = gzfilter(".json.gz", gzip.compress(b"[1]"))
    assert isinstance(c, Continue) and c.key == ".json" and c.data == b"[1]"
    assert gzfilter(".txt", b"x") is None
    # Without the pre handlers nothing decompresses.
    assert Decoder([], pre=[])(sample(**{"txt.gz": gzip.compress(b"x")}))["txt.gz"] != "x"


def test_gz_too_large(monkeypatch):
    monkeypatch.setattr(autodecode, "MAX_DECOMPRESSED_SIZE", 100)
    with pytest.raises(DecodingError) as info:
        Decoder([])(sample(**{"txt.gz": gzip.compress(b"x" * 101)}))
    assert "more than 100 bytes" in str(info.value)


def test_decoding_error_names_url_key_field_and_cause():
    def boom(key, data):
        raise RuntimeError("bad bytes")

    with pytest.raises(DecodingError) as info:
        Decoder([boom])(sample(txt=b"x"))
    e = info.value
    assert (e.url, e.key, e.k) == ("mem://shard-0.tar", "k1", "txt")
    assert e.sample["txt"] == b"x"
    assert isinstance(e.__cause__, RuntimeError)
    assert str(e) == "mem://shard-0.tar: k1.txt: cannot decode: RuntimeError: bad bytes"
    assert isinstance(pickle.loads(pickle.dumps(e)), DecodingError)


def test_custom_pre_and_post():
    out = Decoder([], post=[lambda key, data: key])(sample(txt=b"x", cls=b"1"))
    assert out["txt"] == ".txt" and out["cls"] == ".cls"
    with pytest.raises(AssertionError):
        Decoder("rgb8")
    with pytest.raises(AssertionError):
        Decoder(["rgb8"])


def test_decoders_pickle():
    d = Decoder([handle_extension("seg.png", len), imagehandler("torchrgb8")], only="png seg.png")
    d2 = pickle.loads(pickle.dumps(d))
    out = d2(sample(png=PNG, **{"seg.png": PNG}))
    assert out["seg.png"] == len(PNG)
    assert tuple(out["png"].shape) == (3, H, W)
