"""webdataset's API on wdscpp: DataPipeline and its stages, where the engine hands over to
Python, DataLoader workers, WebLoader, mixing, and the shard-level arguments."""

import io
import os
import random
import pickle

import numpy as np
import pytest

import wdscpp as wds
from wdscpp import utils

SHARDS, PER_SHARD = 4, 10


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("compat")
    paths = []
    for s in range(SHARDS):
        path = str(d / f"part-{s:06d}.tar")
        with wds.TarWriter(path) as w:
            for i in range(PER_SHARD):
                n = s * PER_SHARD + i
                img = np.full((4, 6, 3), n, np.uint8)
                w.write({"__key__": f"k{n:03d}", "png": img, "cls": n, "txt": f"text {n}"})
        paths.append(path)
    return paths


def pattern(shards):
    return os.path.dirname(shards[0]) + "/part-{000000..%06d}.tar" % (len(shards) - 1)


def keys(items):
    return [s["__key__"] for s in items]


ALL = [f"k{n:03d}" for n in range(SHARDS * PER_SHARD)]


def test_webdataset_samples_are_dicts_of_bytes_in_order(shards):
    got = list(wds.WebDataset(pattern(shards), shardshuffle=False))
    assert keys(got) == ALL
    s = got[13]
    assert isinstance(s, dict) and s["cls"] == b"13" and s["txt"] == b"text 13"
    assert s["__url__"] == shards[1] and s["__local_path__"] == shards[1]
    assert s["png"][:8] == b"\x89PNG\r\n\x1a\n"


def test_decoded_items_are_numpy_and_batches_collate_as_webdataset(shards):
    ds = wds.WebDataset(shards, shardshuffle=False).decode("rgb8").to_tuple("png", "cls", "txt")
    img, cls, txt = next(iter(ds))
    assert isinstance(img, np.ndarray) and img.shape == (4, 6, 3) and int(img[0, 0, 0]) == 0
    assert cls == 0 and txt == "text 0"
    images, labels, texts = next(iter(ds.batched(8)))
    assert isinstance(images, np.ndarray) and images.shape == (8, 4, 6, 3)
    assert labels.tolist() == list(range(8)) and texts == [f"text {n}" for n in range(8)]
    torch = pytest.importorskip("torch")
    t = next(iter(wds.WebDataset(shards).decode("torchrgb8").to_tuple("png")))[0]
    assert isinstance(t, torch.Tensor) and tuple(t.shape) == (3, 4, 6)


def test_a_generator_stage_hands_the_rest_to_python(shards):
    def pairs(src):  # a plain generator function, as webdataset users write stages
        for s in src:
            yield {"__key__": s["__key__"], "double": s["cls"] * 2}
            yield {"__key__": s["__key__"] + "b", "double": s["cls"] * 2 + 1}

    p = wds.DataPipeline(wds.SimpleShardList(shards), wds.tarfile_to_samples(), wds.decode(),
                         pairs, wds.to_tuple("double"), wds.batched(5))
    got = [int(x) for b in p for x in b[0]]
    assert got == list(range(2 * SHARDS * PER_SHARD))
    with pytest.raises(TypeError, match="pairs"):
        p.engine()
    # Stages before the generator run in the engine: the same pipeline up to it has one.
    head = wds.DataPipeline(wds.SimpleShardList(shards), wds.tarfile_to_samples(), wds.decode())
    assert head.engine().item_kind == "decoded"


def test_stages_work_on_plain_iterators_as_webdataset(shards):
    assert sorted(wds.shuffle(5)(iter(range(50)))) == list(range(50))
    assert list(wds.batched(4, collation_fn=None)(iter(range(10)))) == [
        [0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [b[0].tolist() for b in wds.batched(4, partial=False)(iter([(i,) for i in range(10)]))] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]
    assert list(wds.to_tuple("a;b", "c")([{"b": 1, "c": 2}])) == [(1, 2)]
    assert list(wds.map(lambda x: x + 1)(range(3))) == [1, 2, 3]
    assert list(wds.rename_keys(x="*.jpg")([{"a.jpg": 1, "b.txt": 2}])) == [{"x": 1}]
    assert list(wds.unbatched()([([1, 2], ["a", "b"])])) == [(1, "a"), (2, "b")]


def test_python_stage_errors_go_to_the_handler(shards):
    def boom(s):
        if s["cls"] % 3 == 0:
            raise ZeroDivisionError("every third")
        return s

    base = wds.WebDataset(shards, shardshuffle=False).decode()
    with pytest.raises(ZeroDivisionError, match="every third"):
        list(base.map(boom))
    kept = list(base.map(boom, handler=wds.ignore_and_continue))
    assert [s["cls"] for s in kept] == [n for n in range(40) if n % 3]
    # After a generator stage the same stage runs in Python, with the same handler contract.
    py = wds.DataPipeline(wds.SimpleShardList(shards), wds.tarfile_to_samples(), wds.decode(),
                          lambda src: (s for s in src),
                          wds.map(boom, handler=wds.ignore_and_stop))
    assert [s["cls"] for s in py] == [] and len(list(py)) == 0  # stops at the first (cls 0)


def test_dataloader_workers_each_read_their_share_once(shards):
    torch = pytest.importorskip("torch")
    ds = wds.WebDataset(shards, shardshuffle=False).decode().to_tuple("__key__", "cls")
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    got = [k for k, _ in loader]
    assert sorted(got) == ALL  # every sample once: the workers split the shards
    # A pipeline iterated in the parent first: each forked worker plans its own split again.
    next(iter(ds))
    assert sorted(k for k, _ in torch.utils.data.DataLoader(ds, batch_size=None,
                                                          num_workers=2)) == ALL
    # Without the worker split every worker reads every shard, as in webdataset.
    dup = wds.WebDataset(shards, shardshuffle=False, workersplitter=None).to_tuple("__key__")
    got = [k for (k,) in torch.utils.data.DataLoader(dup, batch_size=None, num_workers=2)]
    assert sorted(got) == sorted(ALL * 2)


def test_webloader_rebatches_across_workers(shards):
    pytest.importorskip("torch")
    ds = wds.WebDataset(shards, shardshuffle=False).decode().to_tuple("cls").batched(3)
    loader = wds.WebLoader(ds, batch_size=None, num_workers=2).unbatched().shuffle(10).batched(7)
    batches = list(loader)
    assert [len(b[0]) for b in batches] == [7] * 5 + [5]
    assert sorted(int(x) for b in batches for x in b[0]) == list(range(40))
    # The pipeline runs whole in the engine: the workers are a wdscpp.Loader's threads, yielding
    # what the DataLoader would (torch tensors).
    assert isinstance(loader.pipeline[0], wds.compat.EngineLoader)
    torch = pytest.importorskip("torch")
    assert all(isinstance(b[0], torch.Tensor) for b in batches)
    # With a Python stage it is torch's DataLoader, with the same items.
    py = ds.compose(lambda src: (x for x in src))
    slow = wds.WebLoader(py, batch_size=None, num_workers=2)
    assert isinstance(slow.pipeline[0], torch.utils.data.DataLoader)
    assert sorted(int(x) for b in slow for x in b[0]) == list(range(40))
    # with_epoch counts per worker, as webdataset's through a DataLoader.
    epoch = wds.WebLoader(wds.WebDataset(shards, shardshuffle=False).with_epoch(15),
                          batch_size=None, num_workers=2)
    assert isinstance(epoch.pipeline[0], wds.compat.EngineLoader) and len(list(epoch)) == 30


def test_set_epoch_reaches_every_kind_of_worker(shards):
    torch = pytest.importorskip("torch")
    ds = wds.WebDataset(shards, shardshuffle=True, seed=3).shuffle(20).to_tuple("__key__")

    def order(loader):
        return [k for (k,) in loader]

    for make in (lambda: torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2),
                 lambda: wds.WebLoader(ds, batch_size=None, num_workers=2)):
        loader = make()
        ds.set_epoch(0)
        first = order(loader)
        ds.set_epoch(1)
        other = order(loader)
        assert sorted(other) == sorted(first) and other != first
        ds.set_epoch(0)
        assert order(loader) == first
    # Without set_epoch, DataLoader workers take each epoch from torch's seed of that epoch's
    # iteration: another order every epoch, as webdataset's.
    fresh = wds.WebDataset(shards, shardshuffle=True, seed=3).shuffle(20).to_tuple("__key__")
    loader = torch.utils.data.DataLoader(fresh, batch_size=None, num_workers=2)
    assert order(loader) != order(loader)


def test_a_pipeline_pickles_with_its_stages(shards):
    ds = wds.WebDataset(shards, shardshuffle=False).decode().select(_odd).to_tuple("cls")
    again = pickle.loads(pickle.dumps(ds))
    assert [c for (c,) in again] == [n for n in range(40) if n % 2]


def _odd(sample):
    return sample["cls"] % 2 == 1


def test_empty_check_raises_for_a_worker_without_shards(shards):
    torch = pytest.importorskip("torch")
    one = wds.WebDataset(shards[:1], shardshuffle=False)
    with pytest.raises(ValueError, match="No samples found"):
        list(torch.utils.data.DataLoader(one, batch_size=None, num_workers=2))
    quiet = wds.WebDataset(shards[:1], shardshuffle=False, empty_check=False)
    got = list(torch.utils.data.DataLoader(quiet, batch_size=None, num_workers=2))
    assert len(got) == PER_SHARD


def test_split_by_node_in_a_datapipeline_uses_the_rank(shards, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    mine = keys(wds.DataPipeline(wds.SimpleShardList(shards), wds.split_by_node,
                                 wds.tarfile_to_samples()))
    other = keys(wds.DataPipeline(wds.SimpleShardList(shards), wds.tarfile_to_samples()))
    assert 0 < len(mine) < len(other) == 40  # without split_by_node every rank reads all
    monkeypatch.setenv("RANK", "0")
    theirs = keys(wds.DataPipeline(wds.SimpleShardList(shards), wds.split_by_node,
                                   wds.tarfile_to_samples()))
    assert sorted(mine + theirs) == ALL
    with pytest.raises(ValueError, match="explicit nodesplitter"):
        list(wds.DataPipeline(wds.SimpleShardList(shards), wds.single_node_only,
                              wds.tarfile_to_samples()))


def test_with_epoch_repeat_and_length(shards):
    ds = wds.WebDataset(shards, shardshuffle=False).with_epoch(55)
    assert len(list(ds)) == 55 and len(ds) == 55
    assert len(list(wds.WebDataset(shards[:1], shardshuffle=False).repeat(3))) == 30
    with pytest.raises(TypeError):
        len(wds.WebDataset(shards))
    assert len(wds.WebDataset(shards).with_length(7)) == 7
    mixed = wds.DataPipeline(wds.SimpleShardList(shards), wds.tarfile_to_samples(),
                             lambda src: src).with_epoch(45)  # repeated in Python
    assert len(list(mixed)) == 45


def test_select_files_and_rename_files_see_member_names(shards):
    only_png = wds.WebDataset(shards, shardshuffle=False,
                              select_files=lambda name: name.endswith(".png"))
    assert all(set(s) - {"__key__", "__url__", "__local_path__"} == {"png"} for s in only_png)
    renamed = wds.WebDataset(shards, shardshuffle=False,
                             rename_files=lambda name: name.replace(".txt", ".caption"))
    s = next(iter(renamed))
    assert s["caption"] == b"text 0" and "txt" not in s


def test_random_mix_and_round_robin(shards):
    a = wds.WebDataset(shards[:1], shardshuffle=False).to_tuple("__key__")
    b = wds.WebDataset(shards[1:2], shardshuffle=False).to_tuple("__key__")
    twice = [k for (k,) in wds.RoundRobin([a, a])]  # one pipeline, two independent passes
    assert sorted(twice) == sorted(ALL[:PER_SHARD] * 2)
    rr = [k for (k,) in wds.RoundRobin([a, b])]
    assert rr[:4] == ["k000", "k010", "k001", "k011"] and len(rr) == 20
    mixed = [k for (k,) in wds.RandomMix([a, b], probs=[3, 1], longest=True)]
    assert sorted(mixed) == sorted(keys(wds.WebDataset(shards[:2], shardshuffle=False)))
    assert [k for k in mixed if k < "k010"] == [f"k{n:03d}" for n in range(10)]  # in order
    # Ends at the first pick of a source that has ended: one of them is drained. Unseeded, both
    # drain before that pick about once in a hundred runs (10 of each in the first 20 picks).
    random.seed(5)
    shortest = [k for (k,) in wds.RandomMix([a, b], probs=[3, 1])]
    drained = [sum(1 for k in shortest if (k < "k010") == first) for first in (True, False)]
    assert PER_SHARD in drained and len(shortest) < 2 * PER_SHARD


def test_resampled_draws_a_fixed_number_per_pass(shards):
    ds = wds.WebDataset(shards, resampled=True, nodesplitter=None).with_epoch(25)
    got = keys(ds)
    assert len(got) == 25 and set(got) <= set(ALL)
    shard_list = list(wds.ResampledShards(shards, nshards=7, deterministic=True))
    assert len(shard_list) == 7 and all(x["url"] in shards for x in shard_list)


def test_pipe_urls_run_unless_security_is_enforced(shards, monkeypatch):
    url = f"pipe:cat {shards[0]}"
    assert keys(wds.WebDataset(url, shardshuffle=False)) == ALL[:PER_SHARD]
    monkeypatch.setattr(utils, "enforce_security", True)
    with pytest.raises(PermissionError, match="pipe"):
        list(wds.WebDataset(url, shardshuffle=False))


def test_a_truncated_shard_is_tarfile_read_error(shards, tmp_path):
    import tarfile

    data = open(shards[0], "rb").read()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 2 + 100])
    with pytest.raises(tarfile.ReadError):
        list(wds.WebDataset(str(cut), shardshuffle=False))
    partial = list(wds.WebDataset(str(cut), shardshuffle=False, handler=wds.ignore_and_stop,
                                  empty_check=False))
    assert 0 < len(partial) < PER_SHARD


def test_python_decode_with_callables_and_pil(shards):
    from PIL import Image

    def upper(key, data):
        return data.decode().upper() if key.endswith("txt") else None

    s = next(iter(wds.WebDataset(shards, shardshuffle=False).decode(upper, "pil")))
    assert s["txt"] == "TEXT 0" and isinstance(s["png"], Image.Image)
    assert s["png"].size == (6, 4) and s["cls"] == 0
    h = wds.handle_extension("png", lambda data: len(data))
    s = next(iter(wds.WebDataset(shards, shardshuffle=False).decode(h)))
    assert isinstance(s["png"], int) and s["txt"] == "text 0"


def test_gopen_reads_through_the_engine(shards):
    with wds.gopen(shards[0]) as f:
        head = f.read(512)
    assert head[:8] == b"k000.cls"
    buf = io.BytesIO(open(shards[0], "rb").read())
    assert buf.read(512) == head


def test_decode_hands_python_only_formats_to_python(tmp_path):
    path = str(tmp_path / "py.tar")
    arrays = [np.arange(6.0).reshape(2, 3), np.ones(2, np.int32)]
    with wds.TarWriter(path) as w:
        w.write({"__key__": "a", "pyd": {"x": [1, 2]}, "ten": arrays, "cls": 4})
    ds = wds.WebDataset(path, shardshuffle=False).decode()
    s = next(iter(ds))
    assert ds.engine().item_kind == "decoded"  # decoded by the engine, pyd and ten in Python
    assert s["pyd"] == {"x": [1, 2]} and s["cls"] == 4
    assert isinstance(s["ten"], list) and len(s["ten"]) == 2
    assert np.array_equal(s["ten"][0], arrays[0]) and s["ten"][1].dtype == np.int32
    (ten,) = next(iter(wds.WebDataset(path, shardshuffle=False).decode().to_tuple("ten")))
    assert np.array_equal(ten[0], arrays[0])


def test_small_stages_on_plain_iterators():
    samples = [{"__key__": "a", "x": 1}, {"__key__": "b", "x": 2}]
    joined = list(wds.associate({"a": {"y": 10}})(iter([dict(s) for s in samples])))
    assert joined == [{"__key__": "a", "x": 1, "y": 10}, {"__key__": "b", "x": 2}]
    cached = wds.Cached()
    calls = []

    def source():
        calls.append(1)
        yield from range(3)

    assert list(cached(source())) == [0, 1, 2] and list(cached(source())) == [0, 1, 2]
    assert len(calls) == 1  # the second pass replays without reading its source
    assert wds.transform_with((1, "a", 3), [str, None, lambda v: v * 2]) == ["1", "a", 6]
    assert wds.getfirst({"png": 1}, "jpg;png") == 1
    assert wds.getfirst({}, "jpg", default=5, missing_is_error=False) == 5
    out = io.StringIO()
    assert list(wds.info(n=1, stream=out, name="s")(iter(samples))) == samples
    assert out.getvalue().startswith("s 0 ") and "b" not in out.getvalue()


def test_join_reads_shard_sets_of_other_fields_in_lockstep(shards, tmp_path):
    # Captions and embeddings beside the images: same keys in the same order, one shard each.
    cols = {"cap": "txt", "emb": "npy"}
    for name, ext in cols.items():
        for s in range(SHARDS):
            with wds.TarWriter(str(tmp_path / f"{name}-{s}.tar")) as w:
                for i in range(PER_SHARD):
                    n = s * PER_SHARD + i
                    w.write({"__key__": f"k{n:03d}", f"x{ext}": f"{name} {n}".encode()})
    join = [str(tmp_path / f"{name}-{{0..{SHARDS - 1}}}.tar") for name in cols]
    got = list(wds.WebDataset(pattern(shards), shardshuffle=False, join=join))
    assert keys(got) == ALL
    for s in got:
        n = int(s["__key__"][1:])
        assert s["xtxt"] == f"cap {n}".encode() and s["xnpy"] == f"emb {n}".encode()
        assert s["__url__"].endswith("part-%06d.tar" % (n // PER_SHARD))
    # A pipeline the engine cannot run would drop the join: refused instead.
    with pytest.raises(ValueError, match="join"):
        wds.WebDataset(pattern(shards), join=join, select_files=lambda name: True)
    # Sets of other lengths: the engine's error, naming both counts.
    with pytest.raises(ValueError, match="has 1 shards, the first shard set 4"):
        list(wds.WebDataset(pattern(shards), join=[str(tmp_path / "cap-0.tar")]))


def test_interleave_shards_is_passed_to_the_engine(shards):
    got = keys(wds.WebDataset(pattern(shards), shardshuffle=False, interleave_shards=3))
    # Shards 0, 1, 2 a sample each in turn; shard 3 takes shard 0's slot when it ends.
    first = [f"k{s * PER_SHARD + i:03d}" for i in range(PER_SHARD) for s in range(3)]
    assert got == first + [f"k{3 * PER_SHARD + i:03d}" for i in range(PER_SHARD)]
    with pytest.raises(ValueError, match="interleave_shards"):
        wds.WebDataset(pattern(shards), interleave_shards=3, select_files=lambda name: True)
