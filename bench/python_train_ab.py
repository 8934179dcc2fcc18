"""The training pipeline through the Python API as a user writes it: shuffled samples, the
training transform, batches of 64, on a wdscpp.Loader with 2 worker threads. Prints samples/s
and the process's peak RSS; run it with one build's package on PYTHONPATH and then another's
(bench/README.md, "The layout of issue 24").

    PYTHONPATH=build/python python3 bench/python_train_ab.py '/tmp/wds-photo/train-{000000..000007}.tar'
"""

import resource
import sys
import time

import wdscpp

pattern = sys.argv[1]
ds = (
    wdscpp.WebDataset(pattern, shardshuffle=True, seed=1)
    .shuffle(1000)
    .decode("rgb8", random_resized_crop=224, flip=0.5, normalize="imagenet", layout="chw",
            dtype="float32")
    .to_tuple("jpg", "cls")
    .batched(64)
)
start = time.perf_counter()
n = 0
for images, labels in wdscpp.Loader(ds, workers=2, prefetch=2):
    n += images.numpy().shape[0]
elapsed = time.perf_counter() - start
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"{n} samples in {elapsed:.3f} s: {n / elapsed:.0f} samples/s, peak RSS {peak:.0f} MB")
