// Shard sets joined by key: a shard and its partners read in lockstep, sample by sample.
#include "lib/tar/joined.hpp"

#include <algorithm>
#include <utility>

#include "wds/error.hpp"

namespace wds {

ShardJoin::ShardJoin(const std::vector<std::string>& first,
                     std::vector<std::vector<std::string>> columns)
    : columns_(std::move(columns)) {
  if (columns_.empty()) throw Error::invalid_argument("join: no shard set to join");
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    if (columns_[c].size() != first.size()) {
      throw Error::invalid_argument("join: joined shard set " + std::to_string(c + 1) + " has " +
                                    std::to_string(columns_[c].size()) + " shards, the first set " +
                                    std::to_string(first.size()) +
                                    ": shard i of each is read with shard i of the first");
    }
  }
  for (std::size_t i = 0; i < first.size(); ++i) {
    auto [it, fresh] = index_.emplace(first[i], i);
    if (fresh) continue;
    // The same shard twice (a list repeating it) is fine as long as its partners are the same.
    for (const auto& column : columns_) {
      if (column[it->second] != column[i]) {
        throw Error::invalid_argument(first[i], "",
                                      "join: this shard appears twice in the first set, with "
                                      "different partners ('" +
                                          column[it->second] + "', '" + column[i] + "')");
      }
    }
  }
}

std::vector<std::string> ShardJoin::partners(const std::string& url) const {
  auto it = index_.find(url);
  if (it == index_.end()) {
    throw Error::invalid_argument(url, "",
                                  "join: not a shard of the first set, so it has no partners");
  }
  std::vector<std::string> out;
  out.reserve(columns_.size());
  for (const auto& column : columns_) out.push_back(column[it->second]);
  return out;
}

void ShardSamples::join_columns(std::vector<std::unique_ptr<ShardSamples>> columns) {
  columns_ = std::move(columns);
  // A column's errors (a damaged partner, a duplicate member) are this shard's: they go to
  // whatever handler this shard has when they happen.
  for (auto& column : columns_) {
    column->set_handler([this](const Error& e) { return handler_(e); });
  }
}

std::vector<std::uint64_t> ShardSamples::column_offsets() const {
  std::vector<std::uint64_t> out;
  out.reserve(columns_.size());
  for (const auto& column : columns_) {
    auto point = column->resume_point();
    // A column already finished has no next sample: resuming there finds none, which is the
    // mismatch the uninterrupted run would have reported.
    out.push_back(point ? point->first : UINT64_MAX);
  }
  return out;
}

std::optional<Sample> ShardSamples::next_joined() {
  auto disagree = [this](const ShardSamples& column, const Sample* mine, const Sample* theirs) {
    std::string cause = "joined shards disagree: ";
    cause += mine ? "sample '" + mine->key() + "' at byte " + std::to_string(mine->offset())
                  : std::string("the end of this shard");
    cause += " meets ";
    cause += theirs ? "sample '" + theirs->key() + "' at byte " + std::to_string(theirs->offset())
                    : std::string("the end");
    cause += " of its partner " + column.url() +
             " (the sets must hold the same keys in the same order); the rest of both is "
             "skipped";
    return fail_shard(Error(ErrorCode::corrupt_data, shard_->url, mine ? mine->key() : "", cause),
                      std::nullopt);
  };
  // A column that failed or was stopped has reported its error through our handler.
  auto column_ended = [this](const ShardSamples& column) {
    done_ = true;
    failed_ = failed_ || column.failed();
    stopped_ = stopped_ || column.stopped();
    return std::nullopt;
  };

  std::optional<Sample> sample = next_own();
  if (!sample) {
    if (failed_ || stopped_) return std::nullopt;
    for (auto& column : columns_) {  // every partner must end here too
      std::optional<Sample> extra = column->next();
      if (column->failed() || column->stopped()) return column_ended(*column);
      if (extra) return disagree(*column, nullptr, &*extra);
    }
    return std::nullopt;
  }
  sample->columns().reserve(columns_.size());
  // Which shard each field came from, to name both in a duplicate's error: fields before
  // field_ends_[0] are this shard's, then up to field_ends_[k] column k's (a member kept between
  // calls, so that no sample pays an allocation for it).
  field_ends_.assign(1, sample->fields().size());
  for (auto& column : columns_) {
    std::optional<Sample> part = column->next();
    if (!part) {
      if (column->failed() || column->stopped()) return column_ended(*column);
      return disagree(*column, &*sample, nullptr);
    }
    if (part->key() != sample->key()) return disagree(*column, &*sample, &*part);
    sample->columns().push_back(ColumnLocation{part->shard(), part->offset()});
    for (Field& f : part->fields()) {
      const std::vector<Field>& have = sample->fields();
      auto there =
          std::find_if(have.begin(), have.end(), [&](const Field& h) { return h.ext == f.ext; });
      if (there != have.end()) {
        const auto index = static_cast<std::size_t>(there - have.begin());
        const std::string* owner = &shard_->url;
        for (std::size_t k = 1; k < field_ends_.size() && index >= field_ends_[k - 1]; ++k) {
          owner = &columns_[k - 1]->url();
        }
        Error dup(ErrorCode::corrupt_data, column->url(), sample->key() + "." + f.ext,
                  "field '" + f.ext + "' of sample '" + sample->key() + "' is in " + *owner +
                      " too: the first is kept, this one dropped");
        if (handler_(dup)) {
          detail::count_dropped(metrics_);
          continue;
        }
        done_ = stopped_ = true;
        return std::nullopt;
      }
      sample->fields().push_back(std::move(f));
    }
    field_ends_.push_back(sample->fields().size());
  }
  return sample;
}

void join_partners(ShardSamples& shard, const ShardJoin& join, TarReaderOptions tar,
                   MetricsCounters* metrics, const OpenPartner& open_partner) {
  std::vector<std::string> partners = join.partners(shard.url());
  std::vector<std::unique_ptr<ShardSamples>> columns;
  columns.reserve(partners.size());
  for (std::size_t c = 0; c < partners.size(); ++c) {
    columns.push_back(std::make_unique<ShardSamples>(open_partner(c, partners[c]),
                                                     reraise_exception, tar, 0, metrics));
  }
  for (const std::string& url : partners) count_shard(metrics, url);
  shard.join_columns(std::move(columns));
}

ReopenedShard reopen_joined(const ShardJoin& join, const std::string& url, std::uint64_t offset,
                            const std::string& key,
                            const std::vector<std::uint64_t>& column_offsets,
                            const OpenOptions& open, TarReaderOptions tar,
                            MetricsCounters* metrics) {
  std::vector<std::string> partners = join.partners(url);
  if (column_offsets.size() != partners.size() && !key.empty()) {
    throw Error::invalid_argument(url, key,
                                  "pipeline state holds " + std::to_string(column_offsets.size()) +
                                      " joined columns, this pipeline joins " +
                                      std::to_string(partners.size()) + ": malformed state");
  }
  ReopenedShard out = reopen_at(url, offset, key, open, tar, metrics);
  std::vector<std::unique_ptr<ShardSamples>> columns;
  columns.reserve(partners.size());
  for (std::size_t c = 0; c < partners.size(); ++c) {
    ReopenedShard part =
        reopen_at(partners[c], key.empty() ? 0 : column_offsets[c], key, open, tar, metrics);
    if (out.sample && part.sample) {
      out.sample->columns().push_back(ColumnLocation{part.sample->shard(), part.sample->offset()});
      // A field in two sets was reported when the sample was first read: dropped again here.
      for (Field& f : part.sample->fields()) {
        if (!out.sample->find(f.ext)) out.sample->fields().push_back(std::move(f));
      }
    }
    columns.push_back(std::move(part.shard));
  }
  out.shard->join_columns(std::move(columns));
  return out;
}

void save_column_offsets(StateWriter& out, const std::vector<std::uint64_t>& offsets) {
  out.put(static_cast<std::uint64_t>(offsets.size()));
  for (std::uint64_t offset : offsets) out.put(offset);
}

std::vector<std::uint64_t> load_column_offsets(StateReader& in, const ShardJoin& join) {
  const std::uint64_t n = in.get_u64();
  if (n != join.columns()) {
    throw Error::invalid_argument("pipeline state holds a sample of " + std::to_string(n) +
                                  " joined columns, this pipeline joins " +
                                  std::to_string(join.columns()) + ": malformed state");
  }
  std::vector<std::uint64_t> offsets;
  offsets.reserve(join.columns());
  for (std::uint64_t c = 0; c < n; ++c) offsets.push_back(in.get_u64());
  return offsets;
}

void describe_join(Configuration& c, const ShardJoin& join) {
  c.add("join", static_cast<std::uint64_t>(join.columns()));
  for (std::size_t k = 0; k < join.columns(); ++k) {
    c.add_list("join " + std::to_string(k + 1), join.column(k));
  }
}

}  // namespace wds
