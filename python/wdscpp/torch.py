"""wdscpp.torch: a wdscpp pipeline as a torch IterableDataset that yields torch tensors.

    from wdscpp.torch import TorchDataset
    data = TorchDataset(ds, workers=4, prefetch=2)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=0)
    for epoch in range(start, epochs):
        data.set_epoch(epoch)
        for images, labels in loader: ...
        checkpoint["data"] = data.state_dict()     # and data.load_state_dict(...) to resume

Batching and worker threads are wdscpp's (batch_size=None, num_workers=0 in the DataLoader):
torch's worker processes would each run a copy of the whole pipeline. Tensors cross through
DLPack without a copy (torch.from_dlpack), so a batch stays in the memory wds decoded it into.
"""

import torch
import torch.utils.data

from ._wdscpp import DecodedSample, Sample, Tensor
from .pipeline import Loader


def to_torch(item):
    """Tensors in `item` (a tensor, tuple, list, dict or sample) as torch tensors, no copy."""
    if isinstance(item, Tensor):
        return torch.from_dlpack(item)
    if isinstance(item, tuple):
        return tuple(to_torch(x) for x in item)
    if isinstance(item, list):
        return [to_torch(x) for x in item]
    if isinstance(item, (dict, Sample, DecodedSample)):
        return {k: to_torch(v) for k, v in item.items()}
    return item


class TorchDataset(torch.utils.data.IterableDataset):
    """Iterates a wdscpp Dataset through a resumable wdscpp Loader, yielding torch tensors."""

    def __init__(self, dataset, workers=1, prefetch=2, ordered=False, epoch_length=None):
        super().__init__()
        self.loader = Loader(dataset, workers=workers, prefetch=prefetch, ordered=ordered,
                             resumable=True, epoch_length=epoch_length)
        self.epoch_length = epoch_length
        self._length = None
        try:
            self._length = len(dataset)
        except Exception:  # noqa: BLE001 - a dataset without a declared length
            pass

    def __iter__(self):
        for item in self.loader:
            yield to_torch(item)

    def __len__(self):
        if self.epoch_length is not None:
            return self.epoch_length
        if self._length is None:
            raise TypeError("this dataset has no length: use with_length(n) or with_epoch(n)")
        return self._length

    def set_epoch(self, epoch):
        """The epoch the next pass reads (its shard and sample order)."""
        self.loader.set_epoch(epoch)

    def state_dict(self):
        """Where the loader is, as of the items yielded (what StatefulDataLoader saves)."""
        return {"wdscpp_loader": self.loader.state()}

    def load_state_dict(self, state):
        """Continues where state_dict() was taken, on a dataset of the same configuration."""
        self.loader.restore(state["wdscpp_loader"])
