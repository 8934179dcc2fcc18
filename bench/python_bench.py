#!/usr/bin/env python3
"""The same pipelines driven from Python (wdscpp) and from C++ (`wds bench`) on the same shards.

    PYTHONPATH=build/python python3 bench/python_bench.py build/tools/wds \
        'DIR/shard-{000000..000007}.tar' [--tiny 'DIR/tiny-{000000..000007}.tar']

Cases (the issue's): raw tiny samples (one worker), decode + to_tuple (2 workers), and
shuffle + decode + batch 64 on 2 workers. Each case runs C++ first, then Python, one pass each,
and prints samples/s of both and the ratio. Python pays one object per item it receives (a
sample, a tuple or a batch); the stages themselves run in C++ on the loader's threads.
"""

import argparse
import json
import resource
import subprocess
import time

import wdscpp


def cpp(tool, urls, args):
    out = subprocess.run([tool, "bench", *urls, "--json", *args], check=True,
                         capture_output=True, text=True).stdout
    j = json.loads(out.strip().splitlines()[-1])
    return j["samples_per_s"], j["peak_rss_mb"]


def py(make, rows, workers):
    loader = wdscpp.Loader(make(), workers=workers, prefetch=2)
    start = time.perf_counter()
    samples = 0
    for item in loader:
        samples += rows(item)
    return samples / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tool", help="the built wds binary (build/tools/wds)")
    ap.add_argument("urls", help="image shards with jpg and cls fields")
    ap.add_argument("--tiny", help="shards of tiny samples (default: urls)")
    ap.add_argument("--image", default="jpg", help="the image field (default jpg)")
    a = ap.parse_args()
    tiny = a.tiny or a.urls
    fields = f"{a.image} cls"
    cases = [
        ("raw tiny samples, 1 worker", [tiny], ["--workers", "1"],
         lambda: wdscpp.WebDataset(tiny), lambda s: 1, 1),
        ("decode + to_tuple, 2 workers", [a.urls],
         ["--workers", "2", "--decode", "rgb8", "--tuple", fields],
         lambda: wdscpp.WebDataset(a.urls).decode("rgb8").to_tuple(*fields.split()),
         lambda t: 1, 2),
        ("shuffle + decode + batch 64, 2 workers", [a.urls],
         ["--workers", "2", "--shuffle", "1000", "--decode", "rgb8", "--tuple", fields,
          "--batch", "64"],
         lambda: wdscpp.WebDataset(a.urls).shuffle(1000).decode("rgb8")
         .to_tuple(*fields.split()).batched(64),
         lambda b: len(b[1]), 2),
    ]
    # Peak RSS: the wds process's own; Python's is this process's so far (it runs the cases in
    # turn, so a case's figure includes what the ones before it held).
    print(f"{'case':42} {'C++ samples/s':>14} {'peak RSS':>9} {'Python samples/s':>17} "
          f"{'peak RSS':>9} {'Python/C++':>10}")
    for name, urls, args, make, rows, workers in cases:
        c, c_rss = cpp(a.tool, urls, args)
        p = py(make, rows, workers)
        p_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:42} {c:14.0f} {c_rss:7.0f}MB {p:17.0f} {p_rss:7.0f}MB {100 * p / c:9.1f}%")


if __name__ == "__main__":
    main()
