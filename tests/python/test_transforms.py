"""The training and evaluation transforms through decode(): shapes, dtypes and layouts, the same
tensors whatever the number of workers and across a resume, and the values torchvision gives on
PIL images (when torchvision is installed)."""

import io
import tarfile

import numpy as np
import pytest

import wdscpp
from test_wdscpp import png_bytes

N_SHARDS, PER_SHARD = 3, 8
SIZES = [(64, 48), (40, 70), (97, 61), (52, 52)]  # sample n is SIZES[n % 4], width x height
IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)


def picture(n, w, h):
    """A smooth picture with some texture, different per sample."""
    y, x = np.mgrid[0:h, 0:w]
    r = (x * 255 // w + 7 * n) % 256
    g = (y * 255 // h + 3 * n) % 256
    b = ((x // 3 + y // 2) % 2) * 120 + 60
    return np.stack([r, g, b], axis=-1).astype(np.uint8)


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """Shards of PNGs of several sizes and aspect ratios, with a class."""
    d = tmp_path_factory.mktemp("photos")
    paths = []
    for s in range(N_SHARDS):
        p = str(d / f"photos-{s:06d}.tar")
        with tarfile.open(p, "w") as tar:
            for i in range(PER_SHARD):
                n = s * PER_SHARD + i
                w, h = SIZES[n % len(SIZES)]
                for ext, data in (("png", png_bytes(picture(n, w, h))), ("cls", str(n).encode())):
                    info = tarfile.TarInfo(f"p{s}_{i:03d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        paths.append(p)
    return paths


def training(shards, **kw):
    return (wdscpp.WebDataset(shards, shardshuffle=True, seed=4).shuffle(5, initial=2)
            .decode("rgb8", random_resized_crop=24, flip=0.5, normalize="imagenet",
                    layout="chw", dtype="float32", **kw)
            .to_tuple("__key__", "png", "cls"))


def test_training_transform_shapes_dtypes_and_batches(photos):
    items = list(training(photos))
    assert len(items) == N_SHARDS * PER_SHARD
    for key, img, _ in items:
        assert img.shape == (3, 24, 24) and img.dtype == "float32", key
    batch = next(iter(training(photos).batched(8)))
    assert batch[1].shape == (8, 3, 24, 24)
    half = next(iter(wdscpp.WebDataset(photos).decode(
        "rgb8", random_resized_crop=16, dtype="float16", layout="hwc").to_tuple("png")))
    assert half[0].shape == (16, 16, 3) and half[0].dtype == "float16"
    evaluation = next(iter(wdscpp.WebDataset(photos).decode(
        "torchrgb", resize=32, crop=28, normalize=([0.5] * 3, [0.25] * 3)).to_tuple("png")))
    # A torch spec gives torch tensors, as in webdataset.
    assert tuple(evaluation[0].shape) == (3, 28, 28) and str(evaluation[0].dtype) == "torch.float32"


def test_bad_parameters_are_value_errors_naming_them(photos):
    ds = wdscpp.WebDataset(photos)
    for kwargs, word in [({"random_resized_crop": 8, "scale": (0.5, 0.2)}, "scale"),
                         ({"random_resized_crop": 8, "ratio": (0, 1)}, "ratio"),
                         ({"flip": 2}, "flip"),
                         ({"normalize": ([0.5, 0.5], [1, 1])}, "mean"),
                         ({"normalize": ([0.5] * 3, [1, 0, 1])}, "std"),
                         ({"normalize": "imagenet"}, "uint8"),
                         ({"normalize": "cifar"}, "imagenet"),
                         ({"dtype": "int32"}, "dtype"),
                         ({"layout": "nchw"}, "layout")]:
        with pytest.raises(ValueError, match=word):
            ds.decode("rgb8", **kwargs)


def by_key(items):
    return {key: np.asarray(img).copy() for key, img, _ in items}


def test_same_tensors_with_any_number_of_workers(photos):
    # Each sample's crop and flip come from (seed, epoch, shard name, key): the order of the
    # samples depends on the workers, their tensors do not.
    alone = by_key(training(photos))
    for workers in (1, 2, 3):
        got = by_key(wdscpp.Loader(training(photos), workers=workers))
        assert got.keys() == alone.keys(), workers
        for key in alone:
            np.testing.assert_array_equal(got[key], alone[key], err_msg=f"{key}, {workers} workers")
    # Flips happen, and not always.
    flips = [np.array_equal(a, a[:, :, ::-1]) for a in alone.values()]
    assert not all(flips)


def test_resume_reproduces_the_tensors(photos):
    def loader():
        return wdscpp.Loader(training(photos), workers=2, ordered=True, resumable=True)

    full = [(k, np.asarray(img).copy()) for k, img, _ in loader()]
    for cut in (1, 7, 15):
        first = loader()
        it = iter(first)
        for _ in range(cut):
            next(it)
        state = first.state()
        del it, first
        second = loader()
        second.restore(state)
        rest = [(k, np.asarray(img).copy()) for k, img, _ in second]
        assert [k for k, _ in rest] == [k for k, _ in full[cut:]], cut
        for (k, a), (_, b) in zip(rest, full[cut:]):
            np.testing.assert_array_equal(a, b, err_msg=f"{k} after a resume at {cut}")


def test_another_epoch_draws_other_crops(photos):
    ds = (wdscpp.WebDataset(photos, seed=4).decode("rgb8", random_resized_crop=24)
          .to_tuple("__key__", "png", "cls"))
    loader = wdscpp.Loader(ds, workers=1)
    first, second = by_key(loader), by_key(loader)
    assert first.keys() == second.keys()
    assert any(not np.array_equal(first[k], second[k]) for k in first)


def test_values_match_torchvision_on_pil_images(photos):
    tv = pytest.importorskip("torchvision.transforms")
    Image = pytest.importorskip("PIL.Image")
    norm = tv.Normalize(IMAGENET_MEAN.tolist(), IMAGENET_STD.tolist())
    # Evaluation: Resize(32) then CenterCrop(28), ToTensor, Normalize.
    ours = wdscpp.WebDataset(photos).decode(
        "torchrgb", resize=32, crop=28, normalize="imagenet").to_tuple("__key__", "png")
    theirs = tv.Compose([tv.Resize(32), tv.CenterCrop(28), tv.ToTensor(), norm])
    # Training with the window fixed to the whole image (scale 1, the image's own ratio), so
    # that both crop the same: RandomResizedCrop is then a resize of the whole image.
    one_step = np.float32(1 / 255) / IMAGENET_STD.min()
    for key, img in ours:
        s, i = int(key[1]), int(key[3:])
        n = s * PER_SHARD + i
        w, h = SIZES[n % len(SIZES)]
        pil = Image.fromarray(picture(n, w, h))
        want = theirs(pil).numpy()
        diff = np.abs(np.asarray(img) - want)
        assert diff.max() <= one_step * 1.01, key  # within one 8-bit level
        assert diff.mean() <= one_step * 0.25, key
        ratio = w / h
        crop = tv.RandomResizedCrop(20, scale=(1, 1), ratio=(ratio, ratio))
        want = tv.Compose([crop, tv.ToTensor(), norm])(pil).numpy()
        got = next(iter(wdscpp.WebDataset([photos[s]]).slice(i, i + 1).decode(
            "torchrgb", random_resized_crop=20, scale=(1, 1), ratio=(ratio, ratio),
            normalize="imagenet").to_tuple("png")))[0]
        diff = np.abs(got - want)
        assert diff.max() <= one_step * 1.01, key
        assert diff.mean() <= one_step * 0.25, key
