#!/usr/bin/env python3
"""An independent model of Python webdataset, for the interop test.

  webdataset_reference.py write DIR     writes shards into DIR and prints their file names
  webdataset_reference.py expect SHARD  prints what `wds ls --json --sha256 SHARD` must print

`write` makes shards the way webdataset's TarWriter does (Python's tarfile, USTAR by default,
members "<key>.<field>" with fields sorted, mode 0o444, user/group "bigdata"), in several formats
and compressions, and one archive with GNU tar (long names, a sparse file, a device, a hard
link). `expect` reads a shard with Python's tarfile and groups it with webdataset's own rules
(tar_file_iterator's name filter, base_plus_ext's regex, group_by_keys), not with wds's code.
"""
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile

MTIME = 1700000000


def tar_writer_shard(path, samples, fmt=tarfile.USTAR_FORMAT, mode="w"):
    """Writes samples as webdataset's TarWriter does."""
    with tarfile.open(path, mode, format=fmt) as tf:
        for sample in samples:
            key = sample["__key__"]
            for field in sorted(sample):
                if field.startswith("_"):
                    continue
                data = sample[field]
                info = tarfile.TarInfo(key + "." + field)
                info.size = len(data)
                info.mtime = MTIME
                info.mode = 0o444
                info.uname = info.gname = "bigdata"
                tf.addfile(info, io.BytesIO(data))


def raw_members(path, members, fmt=tarfile.USTAR_FORMAT):
    """Writes members (name, bytes) in the order given, for names TarWriter would not make."""
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = MTIME
            tf.addfile(info, io.BytesIO(data))


def samples(n, prefix="", size=300):
    out = []
    for i in range(n):
        payload = bytes((i * 31 + j * 7) % 256 for j in range(size + i))
        out.append({
            "__key__": f"{prefix}{i:06d}",
            "jpg": payload,
            "cls": str(i % 10).encode(),
            "json": json.dumps({"i": i, "caption": f"sample {i}"}).encode(),
        })
    return out


def write(outdir):
    os.makedirs(outdir, exist_ok=True)
    names = []

    def add(name):
        names.append(name)
        return os.path.join(outdir, name)

    tar_writer_shard(add("plain-000000.tar"), samples(20))
    tar_writer_shard(add("plain-000001.tar"), samples(5, prefix="dir.v1/sub/"))
    tar_writer_shard(add("compressed.tar.gz"), samples(7), mode="w:gz")
    tar_writer_shard(add("compressed.tar.bz2"), samples(7), mode="w:bz2")
    tar_writer_shard(add("compressed.tar.xz"), samples(7), mode="w:xz")
    # pax: a key of 200 characters and a UTF-8 key.
    tar_writer_shard(add("pax.tar"), samples(2, prefix="x" * 200 + "/") +
                     [{"__key__": "caf\u00e9/\u65e5\u672c", "txt": "utf-8".encode()}],
                     fmt=tarfile.PAX_FORMAT)
    # Names webdataset's rules treat specially, in a fixed order.
    raw_members(add("odd-names.tar"), [
        ("__meta__", b"m"), ("__info__/a.txt", b"i"), ("README", b"r"), (".hidden", b"h"),
        ("a.txt", b"A"), ("a.TXT.GZ", b"Z"), ("a.Seg.PNG", b"S"), ("a.", b"empty-ext"),
        ("__meta__.json", b"{}"), ("dir/.hidden.txt", b"quirk"), ("22.05.png", b"dots"),
        ("b.txt", b""), ("a.cls", b"again"),
    ])
    # GNU tar: long names, a sparse file, a device node, a hard link, a symlink, a directory.
    src = os.path.join(outdir, "gnu-src")
    os.makedirs(os.path.join(src, "d" * 120), exist_ok=True)
    long_key = os.path.join("d" * 120, "n" * 110)
    with open(os.path.join(src, long_key + ".txt"), "wb") as f:
        f.write(b"long name")
    with open(os.path.join(src, "sparse.bin"), "wb") as f:
        f.seek(1 << 20)
        f.write(b"end")
    with open(os.path.join(src, "hard.txt"), "wb") as f:
        f.write(b"hard")
    os.link(os.path.join(src, "hard.txt"), os.path.join(src, "hard.cls"))
    os.symlink("hard.txt", os.path.join(src, "sym.txt"))
    subprocess.run(["tar", "--format=gnu", "--sparse", "--owner=0", "--group=0",
                    f"--mtime=@{MTIME}", "-cf", add("gnu.tar"), "-C", src,
                    long_key + ".txt", "sparse.bin", "hard.txt", "hard.cls", "sym.txt",
                    "d" * 120, "-C", "/", "dev/null"], check=True)
    for name in names:
        print(name)


# --- webdataset's reading rules ---------------------------------------------------------

def meta_name(fname):
    # tar_file_iterator: skip top-level __x__ names and members of a top-level __x__/ folder.
    if "/" not in fname and fname.startswith("__") and fname.endswith("__"):
        return True
    return re.match(r"__[^/]*__($|/)", fname) is not None


def base_plus_ext(path):
    match = re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", path)
    return (match.group(1), match.group(2)) if match else (None, None)


def expect(path):
    url = path
    current = None

    def emit(sample):
        print(json.dumps(sample, ensure_ascii=False, separators=(",", ":")))

    with tarfile.open(path, "r|*") as tf:
        for info in tf:
            if not info.isreg() or info.islnk():
                continue
            if meta_name(info.name):
                continue
            data = tf.extractfile(info).read()
            key, ext = base_plus_ext(info.name)
            if key is None:
                continue
            ext = ext.lower()
            if current is None or current["__key__"] != key:
                if current is not None:
                    emit(current)
                current = {"__key__": key, "__url__": url}
            if ext in current:
                raise SystemExit(f"{path}: duplicate {ext} in {key}")
            current[ext] = hashlib.sha256(data).hexdigest()
    if current is not None:
        emit(current)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("write", "expect"):
        raise SystemExit(__doc__)
    (write if sys.argv[1] == "write" else expect)(sys.argv[2])
