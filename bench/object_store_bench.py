#!/usr/bin/env python3
"""Shards from an object store on loopback: Ceph's RADOS Gateway (S3) and nginx, read by
`wds bench` beside curl and Python webdataset, in the same run on the same cores.

    bench/object_store_bench.py [--webdataset-src WEBDATASET/src] [--large 16x500] [--small 400]
                                [--repeat N] [--runs 3] [--median] [--rows REGEX]
                                [--old-build DIR]

Starts nginx and RGW through scripts/test-servers.sh (stopped at the end), serving two sets made
by examples/make_synthetic_shards (256x256 JPEG + cls + json samples): large shards (16 x 500
samples, ~13.5 MB each) and small objects (4 samples, ~110 KB each). For each row, the best wall
time of 3 runs (process start included; the rows of a set run in turn, one run of each per
round, so that every row sees the machine alike), the peak RSS of the whole process tree in
that run (the sum over the processes, sampled every 10 ms), and the CPU time in that run of the reader
(its process tree) and of the servers (nginx or radosgw + ceph-osd + ceph-mon), which share the
machine's cores here. `wds bench` reads the samples raw (no decode). `--repeat N` reads the large
set N times in every run, so that starting the process weighs less. `--median` gives the median
of `--runs` instead of the best (peak RSS: the highest), for a before and after closer than the
best run's luck; `--rows` keeps only some rows; `--small 0` leaves the small set out.

  curl            one curl process fetching the objects in turn over one kept-alive
                  connection (S3: `--aws-sigv4`), or 4 such processes at once on a quarter each:
                  moving the bytes is the ceiling.
  wds bench       `--workers N` (each worker its own share of the shards) with read-ahead and
                  ranged parts at their defaults, and "off" (WDS_READ_AHEAD=0
                  WDS_PARALLEL_PARTS=1: one shard at a time, one GET each); one stream also
                  with `--workers 0` (the pipeline on the calling thread, no Loader, as a
                  DataLoader worker process runs it). `--old-build DIR`: each wds row again with
                  that build's tool (another checkout's build/), as the before of a change.
  webdataset      `WebDataset("pipe:curl -s ... URL")` as its users read S3, iterated raw: in
                  the process (1) or through torch's DataLoader (4 workers, split_by_worker).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMPTY_SHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def tree_rss_kb(pid):
    """The summed VmRSS of pid and its descendants."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


SERVER_PIDS = []  # the test servers' processes (STATE/pids), for their CPU time


def cpu_seconds(pids):
    """User + system CPU time of every thread of pids so far."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, ValueError, IndexError):
            pass
    return total / tick


def run_once(cmd, env):
    """Wall time, peak RSS of the process tree, its CPU time and the servers' CPU time."""
    peak = [0]
    server0 = cpu_seconds(SERVER_PIDS)
    start = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], tree_rss_kb(p.pid))
            done.wait(0.01)

    t = threading.Thread(target=sample)
    t.start()
    err = p.stderr.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - start
    server = cpu_seconds(SERVER_PIDS) - server0
    done.set()
    t.join()
    code = p.returncode = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"failed ({code}): {' '.join(cmd)[:300]}\n{err.decode()[-2000:]}")
    return wall, peak[0], usage.ru_utime + usage.ru_stime, server


def parallel(cmds):
    """One shell command line running each of cmds at once and waiting for all."""
    import shlex
    return ["bash", "-c", " ".join(f"{shlex.join(c)} &" for c in cmds) + " wait"]


PEER = r"""
import sys, time
import webdataset as wds
urls, workers = sys.argv[1].split("\n"), int(sys.argv[2])
ds = wds.WebDataset(urls, shardshuffle=False, workersplitter=wds.split_by_worker,
                    nodesplitter=None)
if workers:
    import torch
    ds = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
n = sum(1 for _ in ds)
print(n)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--webdataset-src", help="webdataset's source (the directory holding the "
                    "webdataset/ package); without it the peer is left out")
    ap.add_argument("--large", default="16x500", help="SHARDSxSAMPLES of the large set")
    ap.add_argument("--small", type=int, default=400, help="objects of the small set")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1,
                    help="read the large set this many times in each run (every reader), so "
                         "that process start weighs less")
    ap.add_argument("--json", help="also write the rows here")
    ap.add_argument("--old-build", help="another checkout's build directory: its wds too")
    ap.add_argument("--median", action="store_true",
                    help="the median of the runs (wall and CPU times; peak RSS the highest), "
                         "not the best: with many --runs, for a before and after whose "
                         "difference is smaller than the best run's luck")
    ap.add_argument("--rows", help="only the rows whose 'source streams reader' matches this "
                                   "regular expression (each set's ceiling is always kept)")
    a = ap.parse_args()
    tool = os.path.join(a.build, "tools", "wds")
    make = os.path.join(a.build, "examples", "make_synthetic_shards")
    n_large, s_large = (int(x) for x in a.large.split("x"))

    work = tempfile.mkdtemp(prefix="wds-objbench-")
    data, state = os.path.join(work, "data"), os.path.join(work, "state")
    sets = [("large", n_large, s_large)] + ([("small", a.small, 4)] if a.small else [])
    for name, shards, samples in sets:
        subprocess.run([make, os.path.join(data, name), "--shards", str(shards), "--samples",
                        str(samples), "--size", "256", "--seed", "5"], check=True,
                       stdout=subprocess.DEVNULL)
    total = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(data) for f in fs)
    env = dict(os.environ, WDS_TEST_SERVERS="s3",
               WDS_RGW_MEMSTORE_BYTES=str(max(1 << 30, 3 * total)))
    subprocess.run([os.path.join(ROOT, "scripts", "test-servers.sh"), "start", data, state],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    rows = []
    try:
        with open(os.path.join(state, "pids")) as f:
            SERVER_PIDS.extend(int(x) for x in f.read().split())
        srv = {}
        with open(os.path.join(state, "env")) as f:
            for line in f:
                k, _, v = line.removeprefix("export ").strip().partition("=")
                srv[k] = v
        env = dict(os.environ, AWS_ACCESS_KEY_ID=srv["WDS_TEST_AWS_ACCESS_KEY_ID"],
                   AWS_SECRET_ACCESS_KEY=srv["WDS_TEST_AWS_SECRET_ACCESS_KEY"],
                   AWS_REGION="us-east-1", AWS_ENDPOINT_URL=srv["WDS_TEST_S3_ENDPOINT"])
        off = dict(env, WDS_READ_AHEAD="0", WDS_PARALLEL_PARTS="1")
        sigv4 = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                 f"{env['AWS_ACCESS_KEY_ID']}:{env['AWS_SECRET_ACCESS_KEY']}",
                 "-H", f"x-amz-content-sha256: {EMPTY_SHA}"]
        bucket = srv["WDS_TEST_S3_BUCKET"]

        def curl(urls, signed):
            return ["curl", "-s", "-f"] + (sigv4 if signed else []) + \
                   [x for u in urls for x in ("-o", "/dev/null", u)]

        def curls(urls, signed, n):
            return parallel([curl(urls[i::n], signed) for i in range(n)])

        def bench(urls, workers, which=tool):
            return [which, "bench", "--workers", str(workers)] + \
                   (["--num-workers", str(workers)] if workers else []) + urls

        def peer(urls, workers, signed):
            cmd = " ".join(["curl -s -f"] + ([f"--aws-sigv4 aws:amz:us-east-1:s3 --user "
                                               f"{env['AWS_ACCESS_KEY_ID']}:"
                                               f"{env['AWS_SECRET_ACCESS_KEY']}",
                                               f"-H 'x-amz-content-sha256: {EMPTY_SHA}'"]
                                              if signed else []))
            pipes = "\n".join(f"pipe:{cmd} {u}" for u in urls)
            return ["/usr/bin/python3", "-c", PEER, pipes, str(workers)]

        peer_env = dict(env, PYTHONPATH=os.path.abspath(a.webdataset_src or ""))
        for name, _, _ in sets:
            names = sorted(os.listdir(os.path.join(data, name)))
            if name == "large":
                names *= a.repeat
            nbytes = sum(os.path.getsize(os.path.join(data, name, n)) for n in names)
            http = [f"{srv['WDS_TEST_HTTP']}/{name}/{n}" for n in names]
            s3 = [f"s3://{bucket}/shards/{name}/{n}" for n in names]
            s3_http = [f"{srv['WDS_TEST_S3_ENDPOINT']}/{bucket}/shards/{name}/{n}" for n in names]
            local = [os.path.join(data, name, n) for n in names]
            cases = []
            if name == "large":
                cases += [
                    ("local", 1, "cat (ceiling)", ["cat"] + local, env),
                    ("local", 1, "wds bench", bench(local, 1), env),
                    ("nginx", 1, "curl (ceiling)", curl(http, False), env),
                    ("nginx", 1, "wds bench", bench(http, 1), env),
                    ("nginx", 1, "wds bench, off", bench(http, 1), off),
                    ("nginx", 1, "wds bench --workers 0", bench(http, 0), env),
                    ("RGW", 1, "curl --aws-sigv4 (ceiling)", curl(s3_http, True), env),
                    ("RGW", 1, "wds bench", bench(s3, 1), env),
                    ("RGW", 1, "wds bench, off", bench(s3, 1), off),
                    ("RGW", 1, "wds bench --workers 0", bench(s3, 0), env),
                ]
                if a.webdataset_src:
                    cases.append(("RGW", 1, "webdataset, pipe:curl", peer(s3_http, 0, True),
                                  peer_env))
            cases += [
                ("RGW", 4, "4 x curl --aws-sigv4 (ceiling)", curls(s3_http, True, 4), env),
                ("RGW", 4, "wds bench", bench(s3, 4), env),
                ("RGW", 4, "wds bench, off", bench(s3, 4), off),
            ]
            if a.webdataset_src:
                cases.append(("RGW", 4, "webdataset, pipe:curl, DataLoader",
                              peer(s3_http, 4, True), peer_env))
            if a.old_build:  # each wds row again with the old build's tool, right after it
                old = os.path.join(a.old_build, "tools", "wds")
                cases = [c for case in cases for c in
                         ([case] + ([(case[0], case[1], "old: " + case[2],
                                      [old] + case[3][1:], case[4])]
                                    if case[3][0] == tool else []))]
            if a.rows:
                cases = [c for c in cases if "ceiling" in c[2] or
                         re.search(a.rows, f"{c[0]} {c[1]} {c[2]}")]
            print(f"== {name}: {len(names)} objects, {nbytes / 1e6:.1f} MB", flush=True)
            results = [[] for _ in cases]
            for _ in range(a.runs):
                for i, (_, _, _, cmd, e) in enumerate(cases):
                    results[i].append(run_once(cmd, e))
            ceiling = None
            for (where, streams, what, cmd, e), runs in zip(cases, results):
                if a.median:
                    wall, cpu, server = (statistics.median(r[i] for r in runs) for i in (0, 2, 3))
                    rss = max(r[1] for r in runs)
                else:
                    wall, rss, cpu, server = min(runs)
                if "ceiling" in what:
                    ceiling = wall
                row = dict(set=name, source=where, streams=streams, reader=what, wall_s=wall,
                           MB_per_s=nbytes / 1e6 / wall, objects_per_s=len(names) / wall,
                           peak_rss_mb=rss / 1024, of_ceiling=ceiling / wall, reader_cpu_s=cpu,
                           server_cpu_s=server)
                rows.append(row)
                # CPU: the reader's and the servers' in the best run (or their medians); the
                # share is of all the cores the run had (both sides share them here).
                share = (cpu + server) / (wall * (os.cpu_count() or 1))
                print(f"| {name} | {where} | {streams} | {what} | {wall:.3f} s | "
                      f"{row['MB_per_s']:,.0f} | {row['objects_per_s']:,.0f} | "
                      f"{row['peak_rss_mb']:.0f} MB | {100 * row['of_ceiling']:.0f}% | "
                      f"{cpu:.2f} + {server:.2f} s ({100 * share:.0f}%) |", flush=True)
    finally:
        subprocess.run([os.path.join(ROOT, "scripts", "test-servers.sh"), "stop", state])
        subprocess.run(["rm", "-rf", work])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
