"""`import webdataset` loading wdscpp, for running webdataset's own tests against wdscpp:
webdataset.X is wdscpp.X, submodules included (webdataset.writer is wdscpp.writers)."""

import importlib
import sys

import wdscpp

_SUBMODULES = {
    "autodecode": "autodecode", "cache": "cache", "compat": "compat", "gopen": "gopen",
    "extradatasets": "extradatasets", "filters": "filters", "handlers": "handlers", "mix": "mix",
    "pipeline": "pipeline",
    "shardlists": "shardlists", "tariterators": "tariterators", "utils": "utils",
    "writer": "writers",
}
for name, ours in _SUBMODULES.items():
    module = importlib.import_module("wdscpp." + ours)
    sys.modules["webdataset." + name] = module
    if not hasattr(wdscpp, name):  # wdscpp.gopen is the function, as webdataset.gopen is
        setattr(wdscpp, name, module)
sys.modules["webdataset"] = wdscpp
