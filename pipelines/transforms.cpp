#include "wds/transforms.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

namespace wds {

namespace {

[[noreturn]] void collate_error(const std::string& cause) {
  throw Error::invalid_argument("cannot collate: " + cause);
}

// Rows 0..n-1 of one block, in order (what decode() writes into batch slots): the batch is a
// view of them. Row 0 must start the block, so that a batch is never a view into the middle of
// some unrelated buffer.
std::optional<Tensor> slab_view(const std::vector<Value>& column, const Tensor& first) {
  const std::size_t each = first.nbytes();
  const auto& storage = first.storage();
  if (each == 0 || !storage || first.data() != storage.get()) return std::nullopt;
  for (std::size_t i = 1; i < column.size(); ++i) {
    const Tensor& t = column[i].get<Tensor>();
    if (t.data() != first.data() + i * each || storage.owner_before(t.storage()) ||
        t.storage().owner_before(storage)) {
      return std::nullopt;
    }
  }
  Tensor::Shape shape{static_cast<std::int64_t>(column.size())};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  return Tensor(first.dtype(), std::move(shape), storage, first.data());
}

Value stack_tensors(std::vector<Value>& column, TensorPool* pool) {
  const Tensor& first = column.front().get<Tensor>();
  for (std::size_t i = 1; i < column.size(); ++i) {
    const Tensor* t = column[i].get_if<Tensor>();
    if (!t) {
      collate_error("row " + std::to_string(i) + " is " + column[i].describe() +
                    ", row 0 a tensor");
    }
    if (t->dtype() != first.dtype() || t->shape() != first.shape()) {
      collate_error("row " + std::to_string(i) + " is " + t->describe() + ", row 0 " +
                    first.describe() +
                    " (tensors must match: resize them, or pass a collate function)");
    }
  }
  if (std::optional<Tensor> view = slab_view(column, first)) return std::move(*view);
  Tensor::Shape shape{static_cast<std::int64_t>(column.size())};
  shape.insert(shape.end(), first.shape().begin(), first.shape().end());
  Tensor out =
      pool ? pool->take(first.dtype(), std::move(shape)) : Tensor(first.dtype(), std::move(shape));
  const std::size_t each = first.nbytes();
  std::byte* dst = out.data();
  for (std::size_t i = 0; i < column.size(); ++i) {
    if (each) std::memcpy(dst + i * each, column[i].get<Tensor>().data(), each);
  }
  return out;
}

template <class T>
Value stack_numbers(const std::vector<Value>& column) {
  Tensor out(dtype_of<T>(), {static_cast<std::int64_t>(column.size())});
  auto v = out.values<T>();
  for (std::size_t i = 0; i < column.size(); ++i) {
    if (const std::int64_t* n = column[i].get_if<std::int64_t>()) {
      v[i] = static_cast<T>(*n);
    } else {
      v[i] = static_cast<T>(column[i].get<double>());
    }
  }
  return out;
}

std::vector<Value> split_column(Value&& column, std::size_t n, std::string_view name) {
  std::vector<Value> out;
  out.reserve(n);
  if (Tensor* t = column.get_if<Tensor>()) {
    if (t->ndim() == 0 || static_cast<std::size_t>(t->dim(0)) != n) {
      collate_error("column " + std::string(name) + " is " + t->describe() + ", not " +
                    std::to_string(n) + " rows");
    }
    for (std::size_t i = 0; i < n; ++i) {
      Tensor row = (*t)[static_cast<std::int64_t>(i)];
      // Rows of a 1-D tensor of numbers come back as numbers.
      if (row.ndim() == 0 && row.dtype() == DType::int64) {
        out.emplace_back(row.values<std::int64_t>()[0]);
      } else if (row.ndim() == 0 && row.dtype() == DType::float64) {
        out.emplace_back(row.values<double>()[0]);
      } else {
        out.emplace_back(std::move(row));
      }
    }
    return out;
  }
  if (Tuple* list = column.get_if<Tuple>()) {
    if (list->size() != n) {
      collate_error("column " + std::string(name) + " has " + std::to_string(list->size()) +
                    " rows, not " + std::to_string(n));
    }
    for (Value& v : *list) out.push_back(std::move(v));
    return out;
  }
  collate_error("column " + std::string(name) + " is " + column.describe() +
                ", not a tensor or a list");
}

}  // namespace

namespace {

Value collate_column(std::vector<Value>&& column, TensorPool* pool) {
  if (column.empty()) return Tuple{};
  bool ints = true, numbers = true;
  for (const Value& v : column) {
    ints = ints && v.is<std::int64_t>();
    numbers = numbers && (v.is<std::int64_t>() || v.is<double>());
  }
  if (column.front().is<Tensor>()) return stack_tensors(column, pool);
  if (ints) return stack_numbers<std::int64_t>(column);
  if (numbers) return stack_numbers<double>(column);
  return Tuple(std::move(column));
}

Tuple collate_tuples(std::vector<Tuple>&& rows, TensorPool* pool) {
  Tuple out;
  if (rows.empty()) return out;
  const std::size_t width = rows.front().size();
  for (std::size_t r = 1; r < rows.size(); ++r) {
    if (rows[r].size() != width) {
      collate_error("row " + std::to_string(r) + " has " + std::to_string(rows[r].size()) +
                    " values, row 0 " + std::to_string(width));
    }
  }
  out.reserve(width);
  for (std::size_t c = 0; c < width; ++c) {
    std::vector<Value> column;
    column.reserve(rows.size());
    for (Tuple& row : rows) column.push_back(std::move(row[c]));
    try {
      out.push_back(collate_column(std::move(column), pool));
    } catch (const Error& e) {
      throw Error(e.code(), "", "", "tuple position " + std::to_string(c) + ": " + e.cause());
    }
  }
  return out;
}

DecodedSample collate_samples(std::vector<DecodedSample>&& rows, TensorPool* pool) {
  DecodedSample out;
  if (rows.empty()) return out;
  const auto& first = rows.front().fields();
  Tuple keys;
  keys.reserve(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    keys.emplace_back(rows[r].key());
    bool same = rows[r].fields().size() == first.size();
    for (std::size_t c = 0; same && c < first.size(); ++c) {
      same = rows[r].find(first[c].ext) != nullptr;
    }
    if (!same) {
      collate_error(rows[r].where() + " has other fields than " + rows.front().where());
    }
  }
  out.set("__key__", Value(std::move(keys)));
  for (const auto& f : first) {
    std::vector<Value> column;
    column.reserve(rows.size());
    for (DecodedSample& row : rows) column.push_back(std::move(*row.find(f.ext)));
    try {
      out.set(f.ext, collate_column(std::move(column), pool));
    } catch (const Error& e) {
      throw Error(e.code(), "", "", "field '" + f.ext + "': " + e.cause());
    }
  }
  return out;
}

}  // namespace

Value collate_column(std::vector<Value>&& column) {
  return collate_column(std::move(column), nullptr);
}
Tuple collate(std::vector<Tuple>&& rows) {
  return collate_tuples(std::move(rows), nullptr);
}
DecodedSample collate(std::vector<DecodedSample>&& rows) {
  return collate_samples(std::move(rows), nullptr);
}

namespace detail {

Tuple collate(std::vector<Tuple>&& rows, TensorPool& pool) {
  return collate_tuples(std::move(rows), &pool);
}
DecodedSample collate(std::vector<DecodedSample>&& rows, TensorPool& pool) {
  return collate_samples(std::move(rows), &pool);
}

Tensor BatchSlots::claim(std::string_view column, DType dtype, const Tensor::Shape& shape) {
  Column* col = nullptr;
  for (Column& c : columns_) {
    if (c.name == column) col = &c;
  }
  if (!col) col = &columns_.emplace_back(Column{std::string(column), Tensor()});
  if (!col->slab.defined()) {
    Tensor::Shape slab_shape;
    slab_shape.reserve(shape.size() + 1);
    slab_shape.push_back(static_cast<std::int64_t>(rows_));
    slab_shape.insert(slab_shape.end(), shape.begin(), shape.end());
    col->slab = pool_.take(dtype, std::move(slab_shape));
    col->claimed = 0;
  } else if (col->slab.dtype() != dtype || col->slab.ndim() != shape.size() + 1 ||
             !std::equal(shape.begin(), shape.end(), col->slab.shape().begin() + 1)) {
    return Tensor();
  }
  if (row_ != col->claimed) return Tensor();
  ++col->claimed;
  return col->slab[static_cast<std::int64_t>(row_)];
}

void BatchSlots::release() noexcept {
  for (Column& c : columns_) {
    c.slab = Tensor();
    c.claimed = 0;
  }
}

}  // namespace detail

std::vector<Tuple> uncollate(Tuple&& batch) {
  std::vector<Tuple> rows;
  if (batch.empty()) return rows;
  std::size_t n = 0;
  if (const Tensor* t = batch.front().get_if<Tensor>()) {
    n = t->ndim() ? static_cast<std::size_t>(t->dim(0)) : 0;
  } else if (const Tuple* l = batch.front().get_if<Tuple>()) {
    n = l->size();
  }
  rows.assign(n, Tuple(batch.size()));
  for (std::size_t c = 0; c < batch.size(); ++c) {
    std::vector<Value> column =
        split_column(std::move(batch[c]), n, "at position " + std::to_string(c));
    for (std::size_t r = 0; r < n; ++r) rows[r][c] = std::move(column[r]);
  }
  return rows;
}

std::vector<DecodedSample> uncollate(DecodedSample&& batch) {
  Value* keys = batch.find("__key__");
  if (!keys || !keys->is<Tuple>()) {
    collate_error("a batch of samples needs the field __key__ (a list of keys)");
  }
  std::vector<Value> key_list =
      split_column(std::move(*keys), keys->get<Tuple>().size(), "__key__");
  const std::size_t n = key_list.size();
  std::vector<DecodedSample> rows;
  rows.reserve(n);
  for (Value& k : key_list) rows.emplace_back(k.is<std::string>() ? k.get<std::string>() : "");
  for (DecodedSample::Field& f : batch.fields()) {
    if (f.ext == "__key__") continue;
    std::vector<Value> column = split_column(std::move(f.value), n, "'" + f.ext + "'");
    for (std::size_t r = 0; r < n; ++r) rows[r].set(f.ext, std::move(column[r]));
  }
  return rows;
}

StreamPtr<Tuple> UnbatchStage::operator()(StreamPtr<Tuple> up) const {
  auto split = [](Tuple&& b) { return uncollate(std::move(b)); };
  return std::make_unique<detail::UnbatchStream<Tuple, Tuple, decltype(split)>>(std::move(up),
                                                                                split);
}
StreamPtr<DecodedSample> UnbatchStage::operator()(StreamPtr<DecodedSample> up) const {
  auto split = [](DecodedSample&& b) { return uncollate(std::move(b)); };
  return std::make_unique<detail::UnbatchStream<DecodedSample, DecodedSample, decltype(split)>>(
      std::move(up), split);
}

// --- to_tuple ---

namespace {

std::vector<std::string> split_on(std::string_view s, char sep) {
  std::vector<std::string> out;
  for (std::size_t i = 0;;) {
    std::size_t j = s.find(sep, i);
    if (j == std::string_view::npos) j = s.size();
    if (j > i) out.emplace_back(s.substr(i, j - i));
    if (j >= s.size()) break;
    i = j + 1;
  }
  return out;
}

Value take_field(DecodedSample& sample, const std::vector<std::string>& alternatives,
                 bool missing_is_error) {
  for (const std::string& name : alternatives) {
    if (name == "__key__") return Value(sample.key());
    if (name == "__url__") return Value(sample.url());
    if (Value* v = sample.find(name)) return std::move(*v);
  }
  if (!missing_is_error) return Value();
  std::string wanted, have;
  for (const std::string& a : alternatives) wanted += (wanted.empty() ? "" : ";") + a;
  for (const auto& f : sample.fields()) have += (have.empty() ? "" : ", ") + f.ext;
  throw Error::invalid_argument(sample.url(), sample.key(),
                                "to_tuple: sample has no field '" + wanted +
                                    "' (it has: " + (have.empty() ? "none" : have) + ")");
}

}  // namespace

Tuple make_tuple(DecodedSample&& sample, const std::vector<std::vector<std::string>>& fields,
                 bool missing_is_error) {
  Tuple out;
  out.reserve(fields.size());
  for (const auto& alternatives : fields) {
    out.push_back(take_field(sample, alternatives, missing_is_error));
  }
  return out;
}

ToTupleStage to_tuple(std::vector<std::string> fields, ToTupleOptions options) {
  if (fields.size() == 1 && fields.front().find(' ') != std::string::npos) {
    fields = split_on(fields.front(), ' ');
  }
  ToTupleStage stage{{}, std::move(options)};
  for (const std::string& f : fields) {
    std::vector<std::string> alternatives = split_on(f, ';');
    if (alternatives.empty() || f.find(' ') != std::string::npos) {
      throw Error::invalid_argument("to_tuple: bad field spec '" + f +
                                    "' (names separated by ';', no spaces)");
    }
    stage.fields.push_back(std::move(alternatives));
  }
  if (stage.fields.empty()) {
    throw Error::invalid_argument("to_tuple: no fields given");
  }
  return stage;
}

StreamPtr<Tuple> ToTupleStage::operator()(StreamPtr<DecodedSample> up) const {
  auto fn = [fields = fields, missing = options.missing_is_error](DecodedSample&& s) {
    return make_tuple(std::move(s), fields, missing);
  };
  return std::make_unique<detail::MapStream<DecodedSample, Tuple, decltype(fn)>>(std::move(up), fn,
                                                                                 options.handler);
}

StreamPtr<Tuple> ToTupleStage::operator()(StreamPtr<Sample> up) const {
  auto fn = [fields = fields, missing = options.missing_is_error](Sample&& s) {
    return make_tuple(DecodedSample(std::move(s)), fields, missing);
  };
  return std::make_unique<detail::MapStream<Sample, Tuple, decltype(fn)>>(std::move(up), fn,
                                                                          options.handler);
}

// --- map_dict, rename ---

MapDictStage map_dict(std::vector<std::pair<std::string, FieldFn>> fns, ErrorHandler handler) {
  return {std::move(fns), std::move(handler)};
}

StreamPtr<DecodedSample> MapDictStage::operator()(StreamPtr<DecodedSample> up) const {
  auto fn = [fns = fns](DecodedSample&& s) {
    for (const auto& [ext, f] : fns) {
      Value& v = s.at(ext);
      v = f(std::move(v));
    }
    return std::move(s);
  };
  return std::make_unique<detail::MapStream<DecodedSample, DecodedSample, decltype(fn)>>(
      std::move(up), fn, handler);
}

RenameStage rename(std::vector<std::pair<std::string, std::string>> renames, bool keep,
                   ErrorHandler handler) {
  return {std::move(renames), keep, std::move(handler)};
}

StreamPtr<DecodedSample> RenameStage::operator()(StreamPtr<DecodedSample> up) const {
  std::vector<std::pair<std::string, std::vector<std::string>>> plan;
  for (const auto& [to, from] : renames) plan.emplace_back(to, split_on(from, ';'));
  auto fn = [plan = std::move(plan), keep = keep](DecodedSample&& s) {
    std::vector<std::pair<std::string, Value>> moved;
    for (const auto& [to, alternatives] : plan) {
      moved.emplace_back(to, take_field(s, alternatives, true));
    }
    DecodedSample out(s.key(), s.shard(), s.offset());
    if (keep) {
      // Every listed alternative goes, present or not, as in WebDataset.
      for (auto& f : s.fields()) {
        bool listed = false;
        for (const auto& p : plan) {
          for (const std::string& a : p.second) listed = listed || a == f.ext;
        }
        if (!listed) out.set(std::move(f.ext), std::move(f.value));
      }
    }
    for (auto& [to, v] : moved) out.set(std::move(to), std::move(v));
    return out;
  };
  return std::make_unique<detail::MapStream<DecodedSample, DecodedSample, decltype(fn)>>(
      std::move(up), fn, handler);
}

}  // namespace wds
