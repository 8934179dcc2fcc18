// python/module.cpp: _wdscpp, the CPython extension behind the `wdscpp` package.
//
// A Python Dataset holds one of four typed C++ pipelines (raw samples, decoded samples, tuples,
// or Python objects made by map()) and dispatches each fluent method to the pipeline it holds;
// a Python Loader holds the matching wds::Loader. Stages run in C++ on the loader's threads (or
// the caller's, when a Dataset is iterated directly) with the GIL released; a Python callable
// given to map() or select() takes the GIL for each call. Items become Python objects only when
// they reach Python: tensors as Tensor (DLPack and NumPy views of the same memory), samples as
// dict-like objects whose fields are converted on access.
//
// One unit per group of bound classes (python/bindings.hpp): errors, values, dataset, loader,
// writers, streams.
#include <pybind11/pybind11.h>

#include "python/bindings.hpp"

PYBIND11_MODULE(_wdscpp, m) {
  m.doc() = "The wds C++ engine: WebDataset pipelines and loaders (import wdscpp).";
  m.attr("__version__") = WDS_VERSION;

  wdscpp::bind_errors(m);
  wdscpp::bind_values(m);
  wdscpp::bind_dataset(m);
  wdscpp::bind_loader(m);
  wdscpp::bind_writers(m);
  wdscpp::bind_streams(m);
}
