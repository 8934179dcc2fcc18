// The Dataset: one of four typed C++ pipelines (raw samples, decoded samples, tuples, or Python
// objects made by map()), each fluent method dispatched to the pipeline it holds; WebDataset()
// and merge_states().
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "python/bindings.hpp"
#include "wds/remote.hpp"

namespace wdscpp {
namespace {

// decode()'s image keywords as ImageDecodeOptions; bad values are ValueErrors (invalid_argument)
// when the stage is made.
wds::ImageDecodeOptions image_options(int resize, int crop, int random_resized_crop,
                                      std::pair<double, double> scale,
                                      std::pair<double, double> ratio, double flip,
                                      const py::object& normalize,
                                      const std::optional<std::string>& layout,
                                      const std::optional<std::string>& dtype, bool full_decode) {
  auto invalid = [](const std::string& what) { return wds::Error::invalid_argument(what); };
  wds::ImageDecodeOptions o;
  o.resize = resize;
  o.crop = crop;
  o.reduced_decode = !full_decode;
  o.random_resized_crop.size = random_resized_crop;
  std::tie(o.random_resized_crop.scale_min, o.random_resized_crop.scale_max) = scale;
  std::tie(o.random_resized_crop.ratio_min, o.random_resized_crop.ratio_max) = ratio;
  o.flip = flip;
  if (py::isinstance<py::str>(normalize)) {
    if (normalize.cast<std::string>() != "imagenet") {
      throw invalid("decode normalize='" + normalize.cast<std::string>() +
                    "': use 'imagenet' or (mean, std)");
    }
    wds::set_imagenet_normalization(o);
  } else if (!normalize.is_none()) {
    try {
      auto [mean, std] = normalize.cast<std::pair<std::vector<float>, std::vector<float>>>();
      o.mean = std::move(mean);
      o.std = std::move(std);
    } catch (const py::cast_error&) {
      throw invalid("decode normalize: use 'imagenet' or (mean, std), two sequences of numbers");
    }
  }
  if (layout) {
    if (*layout != "chw" && *layout != "hwc") {
      throw invalid("decode layout='" + *layout + "': use 'chw' or 'hwc'");
    }
    o.chw = *layout == "chw";
  }
  if (dtype) {
    if (*dtype == "uint8") {
      o.dtype = wds::DType::uint8;
    } else if (*dtype == "float16") {
      o.dtype = wds::DType::float16;
    } else if (*dtype == "float32") {
      o.dtype = wds::DType::float32;
    } else {
      throw invalid("decode dtype='" + *dtype + "': use 'uint8', 'float16' or 'float32'");
    }
  }
  return o;
}

template <class T>
constexpr const char* item_kind() {
  if constexpr (std::is_same_v<T, wds::Sample>)
    return "sample";
  else if constexpr (std::is_same_v<T, wds::DecodedSample>)
    return "decoded";
  else if constexpr (std::is_same_v<T, wds::Tuple>)
    return "tuple";
  else
    return "python";
}

[[noreturn]] void wrong_kind(const char* method, const char* kind, const char* wanted) {
  throw py::type_error(std::string(method) + "() needs " + wanted + "; this dataset yields " +
                       kind + " items");
}

// Calls fn(item) for a map() or select(): the GIL for the call, the item made a Python object.
template <class T>
py::object call_python(const PyFn& fn, T&& item, const char* stage) {
  try {
    return fn.fn(item_to_python(std::move(item)));
  } catch (py::error_already_set& e) {
    throw from_python(e, stage);
  }
}

template <class T>
P<PyItem> map_pipeline(const P<T>& p, PyFnPtr fn, wds::ErrorHandler handler) {
  return p.then(wds::map(
      [fn](T&& item) -> std::optional<PyItem> {
        Gil gil;
        py::object out = call_python(*fn, std::move(item), "map");
        if (out.is_none()) return std::nullopt;  // webdataset's map: None drops the sample
        return PyItem(std::move(out));
      },
      std::move(handler)));
}

// select(pred) on items Python cannot see without converting them: the item is converted for
// the call and the original kept; for Python items the object itself is passed.
template <class T>
P<T> select_pipeline(const P<T>& p, PyFnPtr fn) {
  return p.select([fn](const T& item) -> bool {
    Gil gil;
    try {
      if constexpr (std::is_same_v<T, PyItem>) {
        return py::cast<bool>(fn->fn(item.get()));
      } else if constexpr (std::is_same_v<T, wds::Sample>) {
        return py::cast<bool>(fn->fn(py::cast(PySample{item})));
      } else if constexpr (std::is_same_v<T, wds::DecodedSample>) {
        return py::cast<bool>(fn->fn(py::cast(PyDecoded{item})));
      } else {
        return py::cast<bool>(fn->fn(item_to_python(wds::Tuple(item))));
      }
    } catch (py::error_already_set& e) {
      throw from_python(e, "select");
    }
  });
}

// Python items are batched into a list.
struct ListCollate {
  PyItem operator()(std::vector<PyItem>&& rows) const {
    Gil gil;
    py::list out;
    for (PyItem& r : rows) out.append(r.take());
    return PyItem(std::move(out));
  }
};

// batched(collation_fn=f): f(the batch's items as a list) -> the batch.
struct PyCollate {
  PyFnPtr fn;
  PyItem operator()(std::vector<PyItem>&& rows) const {
    Gil gil;
    py::list items;
    for (PyItem& r : rows) items.append(r.take());
    try {
      return PyItem(fn->fn(std::move(items)));
    } catch (py::error_already_set& e) {
      throw from_python(e, "batched");
    }
  }
};

// Any pipeline's items as Python objects (what a Python callable of a later stage gets).
template <class T>
P<PyItem> as_python_items(const P<T>& p) {
  if constexpr (std::is_same_v<T, PyItem>) {
    return p;
  } else {
    return p.map([](T&& item) {
      Gil gil;
      return PyItem(item_to_python(std::move(item)));
    });
  }
}

// A stage on DecodedSamples (rename, map_dict) after d's samples, raw or decoded. Raw fields
// keep their bytes, so that decode() afterwards still decodes them.
template <class Stage>
Dataset on_samples(const Dataset& d, const Stage& stage, const char* method) {
  return std::visit(
      [&](const auto& p) -> Dataset {
        using T = typename std::decay_t<decltype(p)>::value_type;
        if constexpr (std::is_same_v<T, wds::DecodedSample>) {
          return Dataset{p.then(stage)};
        } else if constexpr (std::is_same_v<T, wds::Sample>) {
          return Dataset{
              p.map([](wds::Sample s) { return wds::DecodedSample(std::move(s)); }).then(stage)};
        } else {
          wrong_kind(method, item_kind<T>(), "samples");
        }
      },
      d.p);
}

// decode(python_fields=(extensions, f)): fields with one of `extensions` (as handle_extension
// matches them) decoded by f(extension, data), taking the GIL; other fields never reach Python.
void add_python_decoders(std::vector<wds::Decoder>& decoders, const py::object& spec) {
  auto [extensions, f] = spec.cast<std::pair<std::vector<std::string>, py::function>>();
  auto fn = std::make_shared<const PyFn>(f);
  for (const std::string& ext : extensions) {
    decoders.emplace_back(wds::handle_extension(ext, [fn, ext](wds::Bytes& data) -> wds::Value {
      Gil gil;
      try {
        return value_from_python(fn->fn(ext, py::bytes(data.str())), ext);
      } catch (py::error_already_set& e) {
        throw from_python(e, "decode");
      }
    }));
  }
}

// Dataset.__next__: the pipeline runs on this thread, the GIL released.
py::object dataset_next(Dataset& d) {
  auto call = d.consumer.enter("Dataset", "next()");
  if (d.inherited_pass) {
    throw std::runtime_error(
        "wdscpp.Dataset: its pass was begun in the parent process before fork(), and its "
        "sources are not in this process: begin a new pass with iter() here");
  }
  if (!d.tracked) throw py::stop_iteration();  // no pass begun yet
  d.consumer.check_owner("Dataset");
  return std::visit(
      [&](auto& p) -> py::object {
        using Item = typename std::decay_t<decltype(p)>::value_type;
        std::optional<Item> item;
        {
          NoGil nogil;
          item = p.next();
        }
        if (!item) {
          d.consumer.end_pass();
          throw py::stop_iteration();
        }
        return item_to_python(std::move(*item));
      },
      d.p);
}

std::vector<std::string> to_strings(const py::args& args, const char* method) {
  std::vector<std::string> out;
  for (py::handle a : args) {
    if (!py::isinstance<py::str>(a)) {
      throw py::type_error(std::string(method) + "(): expected strings, got " +
                           py::repr(a).cast<std::string>());
    }
    out.push_back(a.cast<std::string>());
  }
  return out;
}

}  // namespace

std::unordered_set<Dataset*> g_iterated;

Dataset::~Dataset() {
  if (tracked) g_iterated.erase(this);
}

void bind_dataset(py::module_& m) {
  py::class_<Dataset> ds(m, "Dataset", "A pipeline: fluent stages, one pass per iteration.");
  ds.def_property_readonly("item_kind",
                           [](const Dataset& d) {
                             return std::visit(
                                 [](const auto& p) {
                                   using T = typename std::decay_t<decltype(p)>::value_type;
                                   return item_kind<T>();
                                 },
                                 d.p);
                           })
      .def(
          "shuffle",
          [](const Dataset& d, std::size_t bufsize, std::size_t initial) {
            return std::visit([&](const auto& p) { return Dataset{p.shuffle(bufsize, initial)}; },
                              d.p);
          },
          py::arg("bufsize"), py::arg("initial") = 100)
      .def(
          "slice",
          [](const Dataset& d, std::uint64_t start, std::optional<std::uint64_t> stop,
             std::uint64_t step) {
            return std::visit([&](const auto& p) { return Dataset{p.slice(start, stop, step)}; },
                              d.p);
          },
          py::arg("start"), py::arg("stop") = py::none(), py::arg("step") = 1)
      .def(
          "repeat",
          [](const Dataset& d, std::optional<std::uint64_t> n) {
            return std::visit([&](const auto& p) { return Dataset{p.repeat(n)}; }, d.p);
          },
          py::arg("nepochs") = py::none())
      .def("with_epoch",
           [](const Dataset& d, std::uint64_t n) {
             return std::visit([&](const auto& p) { return Dataset{p.with_epoch(n)}; }, d.p);
           })
      .def("with_length",
           [](const Dataset& d, std::uint64_t n) {
             return std::visit([&](const auto& p) { return Dataset{p.with_length(n)}; }, d.p);
           })
      .def(
          "decode",
          [m](const Dataset& d, py::args specs, py::object handler, std::vector<std::string> only,
              int resize, int crop, int random_resized_crop, std::pair<double, double> scale,
              std::pair<double, double> ratio, double flip, py::object normalize,
              std::optional<std::string> layout, std::optional<std::string> dtype, bool full_decode,
              py::object python_fields, int audio_rate, int audio_channels, double audio_duration,
              double audio_offset, bool audio_random, double audio_max_duration, bool audio_pad,
              int video_frames, double video_fps, int video_stride, py::object video_size,
              double video_offset, bool video_random, int video_threads, double video_max_duration,
              int video_max_frames) {
            wds::DecodeOptions options;
            options.video = {.frames = video_frames,
                             .fps = video_fps,
                             .stride = video_stride,
                             .offset = video_offset,
                             .random_offset = video_random,
                             .threads = video_threads,
                             .max_duration = video_max_duration,
                             .max_frames = video_max_frames};
            if (!video_size.is_none()) {
              // torchvision's size convention: N, or (height, width).
              if (py::isinstance<py::int_>(video_size)) {
                options.video.width = options.video.height = video_size.cast<int>();
              } else {
                auto hw = video_size.cast<std::pair<int, int>>();
                options.video.height = hw.first;
                options.video.width = hw.second;
              }
            }
            options.audio = {.sample_rate = audio_rate,
                             .channels = audio_channels,
                             .duration = audio_duration,
                             .offset = audio_offset,
                             .random_offset = audio_random,
                             .max_duration = audio_max_duration,
                             .pad = audio_pad};
            options.handler = to_handler(handler, m);
            options.only = std::move(only);
            options.image = image_options(resize, crop, random_resized_crop, scale, ratio, flip,
                                          normalize, layout, dtype, full_decode);
            std::vector<wds::Decoder> decoders;
            for (std::string& s : to_strings(specs, "decode"))
              decoders.emplace_back(std::string_view(s));
            if (!python_fields.is_none()) add_python_decoders(decoders, python_fields);
            return std::visit(
                [&](const auto& p) -> Dataset {
                  using T = typename std::decay_t<decltype(p)>::value_type;
                  if constexpr (std::is_same_v<T, wds::Sample> ||
                                std::is_same_v<T, wds::DecodedSample>) {
                    return Dataset{p.then(wds::decode(decoders, options))};
                  } else {
                    wrong_kind("decode", item_kind<T>(), "samples");
                  }
                },
                d.p);
          },
          py::arg("handler") = py::none(), py::arg("only") = std::vector<std::string>{},
          py::arg("resize") = 0, py::arg("crop") = 0, py::arg("random_resized_crop") = 0,
          py::arg("scale") = std::pair<double, double>{0.08, 1.0},
          py::arg("ratio") = std::pair<double, double>{3.0 / 4.0, 4.0 / 3.0}, py::arg("flip") = 0.0,
          py::arg("normalize") = py::none(), py::arg("layout") = py::none(),
          py::arg("dtype") = py::none(), py::arg("full_decode") = false,
          py::arg("python_fields") = py::none(), py::arg("audio_rate") = 0,
          py::arg("audio_channels") = 0, py::arg("audio_duration") = 0.0,
          py::arg("audio_offset") = 0.0, py::arg("audio_random") = false,
          py::arg("audio_max_duration") = wds::AudioDecodeOptions().max_duration,
          py::arg("audio_pad") = false, py::arg("video_frames") = wds::VideoDecodeOptions().frames,
          py::arg("video_fps") = 0.0, py::arg("video_stride") = 1,
          py::arg("video_size") = py::none(), py::arg("video_offset") = 0.0,
          py::arg("video_random") = false, py::arg("video_threads") = 1,
          py::arg("video_max_duration") = wds::VideoDecodeOptions().max_duration,
          py::arg("video_max_frames") = wds::VideoDecodeOptions().max_frames,
          "decode('rgb8', ...): image specs; txt, cls, json and npy fields always decode.\n"
          "Images: resize=N (shorter side), crop=N (centre), or random_resized_crop=N with\n"
          "scale=(min, max) and ratio=(min, max) as torchvision's RandomResizedCrop; flip=p;\n"
          "normalize='imagenet' or (mean, std); layout='chw'|'hwc'; dtype='uint8'|'float16'|\n"
          "'float32'. Each sample's crop and flip come from (seed, epoch, shard name, key).\n"
          "'audio': flac wav mp3 ogg opus m4a fields become (float32 array [channels, frames],\n"
          "sample_rate); audio_rate=R resamples, audio_channels=1|2 mixes, audio_duration=S\n"
          "cuts a window at audio_offset=S or, with audio_random=True, at a start drawn from\n"
          "the sample's seed (audio_pad=True pads windows the audio ends within with zeros);\n"
          "longer than audio_max_duration seconds is an error.\n"
          "'video': mp4 webm mkv avi mov fields become clips, uint8 arrays [T, H, W, 3] (RGB):\n"
          "video_frames=T frames every video_stride-th frame, or at video_fps frames per\n"
          "second, from video_offset=S or, with video_random=True, a start drawn from the\n"
          "sample's seed; video_size=N or (height, width) scales on decode; past the end the\n"
          "last frame repeats; video_max_duration and video_max_frames are limits.")
      .def(
          "to_tuple",
          [m](const Dataset& d, py::args fields, bool missing_is_error, py::object handler) {
            wds::ToTupleOptions options;
            options.missing_is_error = missing_is_error;
            options.handler = to_handler(handler, m);
            auto stage = wds::to_tuple(to_strings(fields, "to_tuple"), options);
            return std::visit(
                [&](const auto& p) -> Dataset {
                  using T = typename std::decay_t<decltype(p)>::value_type;
                  if constexpr (std::is_same_v<T, wds::Sample> ||
                                std::is_same_v<T, wds::DecodedSample>) {
                    return Dataset{p.then(stage)};
                  } else {
                    wrong_kind("to_tuple", item_kind<T>(), "samples");
                  }
                },
                d.p);
          },
          py::arg("missing_is_error") = true, py::arg("handler") = py::none())
      .def(
          "batched",
          [](const Dataset& d, std::size_t n, py::object collation_fn, bool partial) {
            if (!collation_fn.is_none()) {
              // webdataset's collation_fn: the batch's items as Python objects, in a list.
              auto fn = std::make_shared<const PyFn>(collation_fn);
              return std::visit(
                  [&](const auto& p) -> Dataset {
                    return Dataset{as_python_items(p).then(
                        wds::batched(n, PyCollate{std::move(fn)}, partial))};
                  },
                  d.p);
            }
            return std::visit(
                [&](const auto& p) -> Dataset {
                  using T = typename std::decay_t<decltype(p)>::value_type;
                  if constexpr (std::is_same_v<T, wds::Sample>) {
                    wrong_kind("batched", item_kind<T>(),
                               "decoded samples, tuples or Python items (decode() first)");
                  } else if constexpr (std::is_same_v<T, PyItem>) {
                    return Dataset{p.then(wds::batched(n, ListCollate{}, partial))};
                  } else {
                    return Dataset{p.then(wds::batched(n, partial))};
                  }
                },
                d.p);
          },
          py::arg("batchsize"), py::arg("collation_fn") = py::none(), py::arg("partial") = true,
          "Batches of n items (the last one smaller unless partial=False), collated in C++ into "
          "contiguous tensors; collation_fn(list of items) collates in Python instead, as "
          "webdataset's.")
      .def("unbatched",
           [](const Dataset& d) {
             return std::visit(
                 [&](const auto& p) -> Dataset {
                   using T = typename std::decay_t<decltype(p)>::value_type;
                   if constexpr (std::is_same_v<T, wds::Tuple> ||
                                 std::is_same_v<T, wds::DecodedSample>) {
                     return Dataset{p.then(wds::unbatched())};
                   } else {
                     wrong_kind("unbatched", item_kind<T>(), "batches of tuples or samples");
                   }
                 },
                 d.p);
           })
      .def(
          "map_dict",
          [m](const Dataset& d, py::object handler, py::kwargs kw) {
            std::vector<std::pair<std::string, wds::FieldFn>> fns;
            for (auto [name, f] : kw) {
              if (!PyCallable_Check(f.ptr())) {
                throw py::type_error("map_dict(" + name.cast<std::string>() +
                                     "=...) needs a callable");
              }
              auto fn = std::make_shared<const PyFn>(py::reinterpret_borrow<py::object>(f));
              std::string field = name.cast<std::string>();
              fns.emplace_back(field, [fn, field](wds::Value&& v) -> wds::Value {
                Gil gil;
                try {
                  return value_from_python(fn->fn(value_to_python(v)), field);
                } catch (py::error_already_set& e) {
                  throw from_python(e, "map_dict");
                }
              });
            }
            if (fns.empty()) throw py::value_error("map_dict() needs field=function arguments");
            auto stage = wds::map_dict(std::move(fns), to_handler(handler, m));
            return on_samples(d, stage, "map_dict");
          },
          py::kw_only(), py::arg("handler") = py::none(),
          "map_dict(jpg=f, cls=g): each named field replaced by f(value), in place, as "
          "webdataset's map_dict (a missing field is an error, to the handler). f returns bytes, "
          "str, int, float, a NumPy array or a wdscpp.Tensor, so that the later stages (to_tuple, "
          "batched) stay in C++.")
      .def(
          "map_tuple",
          [m](const Dataset& d, py::args fs, py::object handler) {
            std::vector<PyFnPtr> fns;
            for (py::handle f : fs) {
              if (!f.is_none() && !PyCallable_Check(f.ptr())) {
                throw py::type_error("map_tuple() takes callables or None");
              }
              fns.push_back(f.is_none() ? nullptr
                                        : std::make_shared<const PyFn>(
                                              py::reinterpret_borrow<py::object>(f)));
            }
            auto apply = [fns](wds::Tuple&& t) -> wds::Tuple {
              Gil gil;
              for (std::size_t i = 0; i < fns.size() && i < t.size(); ++i) {
                if (!fns[i]) continue;  // None: unchanged
                const std::string where = "tuple position " + std::to_string(i);
                try {
                  t[i] = value_from_python(fns[i]->fn(value_to_python(t[i])), where);
                } catch (py::error_already_set& e) {
                  throw from_python(e, "map_tuple");
                }
              }
              return std::move(t);
            };
            return std::visit(
                [&](const auto& p) -> Dataset {
                  using T = typename std::decay_t<decltype(p)>::value_type;
                  if constexpr (std::is_same_v<T, wds::Tuple>) {
                    return Dataset{p.map(apply, to_handler(handler, m))};
                  } else {
                    wrong_kind("map_tuple", item_kind<T>(), "tuples (to_tuple() first)");
                  }
                },
                d.p);
          },
          py::kw_only(), py::arg("handler") = py::none(),
          "map_tuple(f, None, g): element i of each tuple replaced by fs[i](element), None leaving "
          "it, elements past the functions untouched, as webdataset's map_tuple.")
      .def(
          "rename",
          [m](const Dataset& d, bool keep, py::object handler, py::kwargs kw) {
            std::vector<std::pair<std::string, std::string>> renames;
            for (auto [name, alternatives] : kw) {
              if (!py::isinstance<py::str>(alternatives)) {
                throw py::type_error("rename(" + name.cast<std::string>() +
                                     "=...) needs the old field names as a string (\"jpg;png\")");
              }
              renames.emplace_back(name.cast<std::string>(), alternatives.cast<std::string>());
            }
            if (renames.empty()) throw py::value_error("rename() needs new=\"old\" arguments");
            auto stage = wds::rename(std::move(renames), keep, to_handler(handler, m));
            return on_samples(d, stage, "rename");
          },
          py::kw_only(), py::arg("keep") = true, py::arg("handler") = py::none(),
          "rename(image=\"jpg;png\", label=\"cls\"): each new field takes the first of its old "
          "fields present, which is removed; keep=False drops every other field. As webdataset's "
          "rename (a missing field is an error, to the handler).")
      .def(
          "map",
          [m](const Dataset& d, py::function f, py::object handler) {
            auto fn = std::make_shared<const PyFn>(f);
            auto h = to_handler(handler, m);
            return std::visit([&](const auto& p) { return Dataset{map_pipeline(p, fn, h)}; }, d.p);
          },
          py::arg("f"), py::arg("handler") = py::none(),
          "f(item) -> any Python object (None drops the item); runs on the loader's threads, "
          "taking the GIL for each call.")
      .def("select",
           [](const Dataset& d, py::function f) {
             auto fn = std::make_shared<const PyFn>(f);
             return std::visit([&](const auto& p) { return Dataset{select_pipeline(p, fn)}; }, d.p);
           })
      .def(
          "with_worker",
          [](const Dataset& d, int worker, int num_workers) {
            return std::visit(
                [&](const auto& p) { return Dataset{p.with_worker(worker, num_workers)}; }, d.p);
          },
          py::arg("worker"), py::arg("num_workers"),
          "This pipeline as loader worker `worker` of `num_workers` runs it (a DataLoader "
          "worker process: torch's worker info): its share of the shards or samples.")
      .def("__len__",
           [](const Dataset& d) {
             try {
               return std::visit([](const auto& p) { return p.size(); }, d.p);
             } catch (const wds::Error& e) {
               // TypeError, as len() of an object without a length: list(ds) then just iterates.
               throw py::type_error(e.cause());
             }
           })
      .def_property_readonly(
          "epoch",
          [](const Dataset& d) { return std::visit([](const auto& p) { return p.epoch(); }, d.p); })
      .def("set_epoch",
           [](Dataset& d, std::uint64_t e) {
             auto call = d.consumer.enter("Dataset", "set_epoch()");
             std::visit([&](auto& p) { p.set_epoch(e); }, d.p);
           })
      .def("state",
           [](Dataset& d) {
             auto call = d.consumer.enter("Dataset", "state()");
             return py::bytes(std::visit([](const auto& p) { return p.state(); }, d.p));
           })
      .def("restore",
           [](Dataset& d, const py::bytes& state) {
             std::string s = state;
             auto call = d.consumer.enter("Dataset", "restore()");
             NoGil nogil;
             std::visit([&](auto& p) { p.restore(s); }, d.p);
           })
      .def(
          "fingerprint",
          [](const Dataset& d) {
            return std::visit([](const auto& p) { return p.fingerprint(); }, d.p);
          },
          "A hash of the configuration without rank and worker: equal on every rank of a job "
          "started the same way.")
      .def("__iter__",
           [](py::object self) {
             Dataset& d = self.cast<Dataset&>();
             auto call = d.consumer.enter("Dataset", "iter()");
             if (!d.tracked) {
               g_iterated.insert(&d);
               d.tracked = true;
             }
             d.inherited_pass = false;
             {
               NoGil nogil;
               std::visit([](auto& p) { p.begin_pass(); }, d.p);
             }
             d.consumer.begin_pass();
             return self;
           })
      .def("__next__", &dataset_next);

  m.def(
      "WebDataset",
      [m](py::object urls, bool resampled, py::object shardshuffle,
          std::optional<std::uint64_t> seed, std::optional<std::string> split_policy,
          py::object handler, std::optional<int> rank, std::optional<int> world_size,
          std::optional<std::uint64_t> nshards, bool allow_empty, std::uint64_t streams,
          std::size_t stream_shuffle, std::optional<std::string> cache_dir, std::int64_t cache_size,
          bool allow_pipe, py::object join, std::size_t interleave_shards) {
        wds::WebDatasetOptions o;
        o.interleave_shards = interleave_shards;
        // Shard sets joined by key: one pattern, or a list of them.
        if (py::isinstance<py::str>(join)) {
          o.join = {join.cast<std::string>()};
        } else if (!join.is_none()) {
          o.join = join.cast<std::vector<std::string>>();
        }
        o.open.allow_pipe = allow_pipe;
        o.streams = streams;
        o.stream_shuffle = stream_shuffle;
        o.resampled = resampled;
        o.seed = seed;
        if (split_policy) o.split_policy = wds::parse_split_policy(*split_policy);
        o.handler = to_handler(handler, m);
        o.distributed.rank = rank;
        o.distributed.world_size = world_size;
        o.nshards = nshards;
        o.allow_empty = allow_empty;
        // webdataset's shardshuffle: True shuffles the shards (here one permutation per epoch,
        // the same on every rank, before the split); a number is a shuffle buffer of that many
        // shard URLs per worker, as in webdataset.
        // With resampled=True every worker draws shards at random: webdataset warns that
        // shardshuffle "is ignored" and goes on, and so does this.
        const bool shuffle_asked =
            !shardshuffle.is_none() &&
            !(py::isinstance<py::bool_>(shardshuffle) && !shardshuffle.cast<bool>()) &&
            !(py::isinstance<py::int_>(shardshuffle) && shardshuffle.cast<std::int64_t>() == 0);
        if (resampled && shuffle_asked) {
          py::module_::import("warnings")
              .attr("warn")(
                  "WebDataset(shardshuffle=...) is ignored with resampled=True: every "
                  "worker draws its shards at random",
                  py::module_::import("builtins").attr("UserWarning"), 2);
        } else if (py::isinstance<py::bool_>(shardshuffle)) {
          o.shuffle_shards = shardshuffle.cast<bool>();
        } else if (!shardshuffle.is_none()) {
          o.shard_shuffle = shardshuffle.cast<std::size_t>();
        }
        // webdataset's cache: on when cache_dir is given and cache_size is not 0 (a size in
        // bytes; negative: no limit). Remote shards only: local files are read in place.
        if (cache_dir && cache_size != 0) {
          o.open.backend_options.set(wds::CacheOptions{
              *cache_dir, cache_size < 0 ? 0 : static_cast<std::uint64_t>(cache_size)});
        }
        if (py::isinstance<py::str>(urls)) {
          std::string pattern = urls.cast<std::string>();
          NoGil nogil;  // listings may go to the network
          return Dataset{wds::WebDataset(std::string_view(pattern), std::move(o))};
        }
        std::vector<std::string> list = urls.cast<std::vector<std::string>>();
        NoGil nogil;
        return Dataset{wds::WebDataset(std::move(list), std::move(o))};
      },
      py::arg("urls"), py::kw_only(), py::arg("resampled") = false,
      py::arg("shardshuffle") = py::none(), py::arg("seed") = py::none(),
      py::arg("split_policy") = py::none(), py::arg("handler") = py::none(),
      py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
      py::arg("nshards") = py::none(), py::arg("allow_empty") = false, py::arg("streams") = 0,
      py::arg("stream_shuffle") = 0, py::arg("cache_dir") = py::none(), py::arg("cache_size") = -1,
      py::arg("allow_pipe") = false, py::arg("join") = py::none(), py::arg("interleave_shards") = 1,
      "The shards of `urls` (a pattern or a list) as samples, split between ranks and workers "
      "(streams=C: canonical streams, resumable on another world size; stream_shuffle: each "
      "stream's sample shuffle buffer; cache_dir: keep remote shards there, up to cache_size "
      "bytes, negative for no limit; allow_pipe: read pipe:CMD URLs, which run shell commands; "
      "join: patterns of shard sets holding other fields of the same samples, read in lockstep; "
      "interleave_shards: shards each worker reads at once, a sample from each in turn).");

  m.def(
      "_decode_field",
      [](const std::string& field, const py::bytes& data, const std::string& image_spec) {
        std::string_view view = data;
        wds::Bytes bytes = wds::Bytes::copy_of(view);
        std::optional<wds::Value> v;
        {
          NoGil nogil;
          v = image_spec.empty() ? wds::decode_basic(field, bytes)
                                 : wds::image_decoder(image_spec)(field, bytes);
        }
        return v ? value_to_python(*v) : py::object(py::none());
      },
      py::arg("field"), py::arg("data"), py::arg("image_spec") = "",
      "One field decoded as decode() does it: with the basic decoders (txt, cls, json, npy, ...), "
      "or with an image spec (\"rgb8\", \"torchrgb\", ...); None when none of them takes "
      "the field. For wdscpp's Decoder, which runs Python handlers before these.");
  m.def(
      "_brace_expand", [](const std::string& pattern) { return wds::brace_expand(pattern); },
      py::arg("pattern"), "A pattern's braces expanded as braceexpand does, nothing listed.");
  m.def(
      "_resolve_urls",
      [](const std::string& pattern) {
        NoGil nogil;  // listings may go to the network
        return wds::resolve_urls(pattern);
      },
      py::arg("pattern"),
      "The URLs a pattern names: braces expanded, directories and globs listed.");
  m.def(
      "_distributed",
      [](std::optional<int> rank, std::optional<int> world_size) {
        const wds::DistributedInfo d = wds::detect_distributed({rank, world_size});
        return py::make_tuple(d.rank, d.world_size);
      },
      py::arg("rank") = py::none(), py::arg("world_size") = py::none(),
      "(rank, world_size) as the pipelines find them: the arguments, else the launcher's "
      "variables (wds/distributed.hpp).");

  m.def(
      "merge_states",
      [](const std::vector<py::bytes>& states) {
        std::vector<std::string> in(states.begin(), states.end());
        std::string merged;
        {
          NoGil nogil;
          merged = wds::merge_states(in);
        }
        return py::bytes(merged);
      },
      py::arg("states"),
      "One checkpoint from the states of a job's ranks (Dataset.state() or Loader.state() with "
      "streams): restorable on any number of ranks and workers dividing the stream count.");
}

}  // namespace wdscpp
