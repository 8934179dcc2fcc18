"""webdataset's MockDataset: one sample repeated, for testing pipelines without data."""

from .shardlists import _Dataset


class MockDataset(_Dataset):
    """`sample`, `length` times."""

    def __init__(self, sample, length):
        super().__init__()
        self.sample, self.length = sample, length

    def __iter__(self):
        for _ in range(self.length):
            yield self.sample
