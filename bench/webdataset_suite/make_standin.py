"""Writes a stand-in for webdataset's testdata/imagenet-000000.tgz, which its public repository
snapshot lacks: 47 samples with the fields its tests read (cls png wnid xml), the first image
793 x 600 as they assert, the others of assorted sizes. The pixels and texts are our own."""

import io
import sys
import tarfile

import numpy as np
from PIL import Image


def member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 1700000000
    tar.addfile(info, io.BytesIO(data))


def main(path):
    rng = np.random.default_rng(47)
    with tarfile.open(path, "w:gz") as tar:
        for i in range(47):
            h, w = (793, 600) if i == 0 else (int(rng.integers(120, 500)), int(rng.integers(120, 500)))
            y, x = np.mgrid[0:h, 0:w]
            pixels = np.stack([(x * 255 // w), (y * 255 // h), ((x + y + i * 7) % 256)], axis=-1)
            png = io.BytesIO()
            Image.fromarray(pixels.astype(np.uint8)).save(png, format="PNG")
            key = f"n{10000000 + i * 37:08d}_{i}"
            cls = int(rng.integers(0, 1000))
            member(tar, f"{key}.cls", str(cls).encode())
            member(tar, f"{key}.png", png.getvalue())
            member(tar, f"{key}.wnid", f"n{10000000 + cls:08d}".encode())
            member(tar, f"{key}.xml", f"<annotation><size><width>{w}</width><height>{h}</height></size></annotation>".encode())


if __name__ == "__main__":
    main(sys.argv[1])
