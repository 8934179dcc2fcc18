"""Peak memory of one big compressed text field decoded through Python (wdscpp).

Writes a shard with one sample whose `txt.gz` field decompresses to SIZE_MIB MiB of text (words,
gzip level 1), then, each in a fresh interpreter, decodes it with WebDataset(...).decode()
(the engine form, .engine(), whose samples convert a field when it is read) and
prints the process's peak RSS: once without touching the field (the C++ decode: the compressed
member and the text), once reading it (s["txt.gz"], which makes the Python str, a copy Python
owns). A baseline interpreter with wdscpp imported is printed first.

    PYTHONPATH=build/python python3 bench/text_field_memory.py [SIZE_MIB] [DIR]
"""

import gzip
import io
import os
import random
import subprocess
import sys
import tarfile
import tempfile

size_mib = int(sys.argv[1]) if len(sys.argv) > 1 else 200
directory = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp()
shard = os.path.join(directory, "text-000000.tar")

rnd = random.Random(1)
words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randint(2, 9)))
         for _ in range(5000)]
n = size_mib << 20
parts, size = [], 0
while size < n:
    line = " ".join(rnd.choice(words) for _ in range(12)) + "\n"
    parts.append(line)
    size += len(line)
text = "".join(parts)[:n].encode()
del parts
packed = gzip.compress(text, compresslevel=1)
with tarfile.open(shard, "w") as tar:
    info = tarfile.TarInfo("s0.txt.gz")
    info.size = len(packed)
    tar.addfile(info, io.BytesIO(packed))
print(f"{shard}: text {len(text) / 2**20:.0f} MiB, gzip {len(packed) / 2**20:.0f} MiB")
del text, packed

# VmHWM, the peak RSS of this process's own memory (getrusage's ru_maxrss would start from
# this generator's, inherited at fork).
CASE = """
import sys, wdscpp
mode = sys.argv[2]
if mode != "baseline":
    # The engine form: samples whose fields become Python objects only when read (iterating
    # the pipeline itself gives webdataset's dicts, every field converted).
    for s in wdscpp.WebDataset(sys.argv[1]).decode().engine():
        n = len(s["txt.gz"]) if mode == "read" else len(s.keys())
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
print(f"{mode}: peak RSS {hwm / 1024:.0f} MB")
"""
for mode in ("baseline", "decode", "read"):
    subprocess.run([sys.executable, "-c", CASE, shard, mode], check=True)
os.remove(shard)
