// Members to samples: WebDataset's tar_file_expander and group_by_keys in one pass, so a
// member's bytes go from libarchive straight into the sample's field.
#include "wds/tar_samples.hpp"

#include <string.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "lib/storage/backends.hpp"
#include "lib/tar/joined.hpp"
#include "lib/tar/samples.hpp"
#include "lib/text.hpp"

namespace wds {
namespace {

std::string field_list(const Sample& s) {
  std::string out;
  for (const Field& f : s.fields()) out += (out.empty() ? "" : ", ") + f.ext;
  return out.empty() ? "none" : out;
}

// A member's data. A size the reader verified against the source is read at once (lent by the
// source or copied once, TarReader::read_bytes); any other is read in pieces into a buffer that
// doubles as they arrive, so a header that lies about its size costs no more memory than the
// bytes behind it (and TarReaderOptions::max_member_size) allow.
Bytes read_member(TarReader& reader, const TarEntry& e) {
  constexpr std::uint64_t kFirstPiece = std::uint64_t{64} << 20;
  if (e.size_verified || e.size <= kFirstPiece) {
    return reader.read_bytes(static_cast<std::size_t>(e.size));
  }
  Bytes data(static_cast<std::size_t>(kFirstPiece));
  std::size_t done = 0;
  for (;;) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(data.size(), e.size) - done);
    reader.read_data(data.span().subspan(done, n));
    done += n;
    if (done == e.size) return data;
    Bytes bigger(static_cast<std::size_t>(std::min<std::uint64_t>(e.size, 2 * data.size())));
    std::memcpy(bigger.data(), data.data(), done);
    data = std::move(bigger);
  }
}

// Counts the bytes a shard's source hands out and the time read() takes to hand them: one
// virtual call and two clock reads per chunk (about 1 MiB for files, 256 KiB for HTTP).
class CountingSource final : public ByteSource {
 public:
  CountingSource(std::unique_ptr<ByteSource> inner, MetricsCounters& metrics, std::size_t slot)
      : ByteSource(inner->url()), inner_(std::move(inner)), metrics_(metrics), slot_(slot) {}

  std::span<const std::byte> read() override {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    std::span<const std::byte> chunk;
    try {
      chunk = inner_->read();
    } catch (...) {
      metrics_.add_read(slot_, 0, Clock::now() - start);  // a failed wait was still a wait
      throw;
    }
    metrics_.add_read(slot_, chunk.size(), Clock::now() - start);
    return chunk;
  }
  std::string local_path() const override { return inner_->local_path(); }
  std::optional<std::uint64_t> size() const override { return inner_->size(); }
  Bytes lend(std::span<const std::byte> part) override { return inner_->lend(part); }

 private:
  std::unique_ptr<ByteSource> inner_;
  MetricsCounters& metrics_;
  std::size_t slot_;
};

}  // namespace

std::unique_ptr<ByteSource> open_counted(const std::string& url, const OpenOptions& options,
                                         MetricsCounters* metrics) {
  if (!metrics) return open_url(url, options);
  const std::size_t slot = MetricsCounters::source_slot(url_scheme(url));
  OpenOptions counted = options;
  counted.on_retry = [metrics, slot, user = options.on_retry](const Error& cause, int attempt) {
    if (attempt > 0) metrics->add_retry(slot, is_throttled(cause));  // 0: a cache warning
    if (user) user(cause, attempt);
  };
  return std::make_unique<CountingSource>(open_url(url, counted), *metrics, slot);
}

void count_shard(MetricsCounters* metrics, const std::string& url) {
  if (metrics) metrics->add_shard(MetricsCounters::source_slot(url_scheme(url)));
}

std::optional<KeyExt> split_member_name(std::string_view name) {
  // WebDataset's regex ^((?:.*/|)[^.]+)[.]([^/]*)$ splits at the first dot of the last path
  // component, and accepts the key iff it ends in a non-empty run of non-dots that starts at the
  // beginning of the name or right after a '/'. Checked here without a regex, with one
  // memrchr and one memchr in the common case (this runs once per member).
  const char* begin = name.data();
  const void* slash = name.empty() ? nullptr : ::memrchr(begin, '/', name.size());
  const std::size_t base =
      slash ? static_cast<std::size_t>(static_cast<const char*>(slash) - begin) + 1 : 0;
  const void* found = ::memchr(begin + base, '.', name.size() - base);
  const std::size_t dot = found ? static_cast<std::size_t>(static_cast<const char*>(found) - begin)
                                : std::string_view::npos;
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  if (dot == base) {
    // The basename starts with '.', so the run must end at the '/' before it ("dir/.a.txt" is
    // key "dir/"): it must lie beyond the key's last dot and not be the key's last character.
    std::string_view key = name.substr(0, dot);
    std::size_t last_dot = key.rfind('.');
    if (last_dot != std::string_view::npos) {
      std::size_t run_slash = key.find('/', last_dot + 1);
      if (run_slash == std::string_view::npos || run_slash + 1 >= key.size()) return std::nullopt;
    }
  }
  return KeyExt{name.substr(0, dot), name.substr(dot + 1)};
}

bool is_reserved_field(std::string_view ext) {
  return ext == "__key__" || ext == "__url__" || ext == "__local_path__";
}

bool is_meta_member(std::string_view name) {
  if (name.size() < 2 || name[0] != '_' || name[1] != '_') return false;  // the usual case
  auto dunder = [](std::string_view s) {
    return s.size() >= 2 && s.substr(0, 2) == "__" && s.substr(s.size() - 2) == "__";
  };
  std::size_t slash = name.find('/');
  if (slash == std::string_view::npos) return dunder(name);
  std::string_view top = name.substr(0, slash);
  return top.size() >= 4 && dunder(top);
}

ShardSamples::ShardSamples(std::unique_ptr<ByteSource> source, ErrorHandler handler,
                           TarReaderOptions tar, std::uint64_t base_offset,
                           MetricsCounters* metrics)
    : reader_(std::move(source), tar),
      handler_(std::move(handler)),
      base_offset_(base_offset),
      metrics_(metrics) {
  shard_ =
      std::make_shared<const ShardInfo>(ShardInfo{reader_.url(), reader_.source().local_path()});
  if (!handler_) handler_ = reraise_exception;
}

std::optional<std::pair<std::uint64_t, std::string>> ShardSamples::resume_point() const {
  if (done_) return std::nullopt;
  if (pending_)
    return std::make_pair(base_offset_ + pending_->offset, std::string(pending_parts_.key));
  if (!started_) return std::make_pair(base_offset_, std::string());
  return std::nullopt;  // not reached: next() returns with a pending entry or done
}

std::optional<Sample> ShardSamples::next() {
  return columns_.empty() ? next_own() : next_joined();
}

std::optional<Sample> ShardSamples::next_own() {
  if (done_) return std::nullopt;
  started_ = true;
  std::optional<Sample> sample;  // returned as is (no move) once complete
  for (;;) {
    const TarEntry* e = nullptr;
    std::optional<KeyExt> parts;
    if (pending_) {
      e = std::exchange(pending_, nullptr);
      parts = pending_parts_;
    } else {
      try {
        e = reader_.next();
      } catch (const Error& err) {
        return fail_shard(err, sample);  // an error the handler throws leaves this catch
      }
      if (!e) {
        done_ = true;
        return sample;
      }
      if (e->type != EntryType::file || is_meta_member(e->name)) continue;
      parts = split_member_name(e->name);
      if (!parts) continue;
    }
    if (sample && parts->key != sample->key()) {
      // The first member of the next sample: kept, with its split, for the next call.
      pending_ = e;
      pending_parts_ = *parts;
      return sample;
    }
    std::string ext(parts->ext);
    ext = lowercase(ext);
    const bool reserved = is_reserved_field(ext);
    if (!sample && !reserved) {
      sample.emplace(std::string(parts->key), shard_, base_offset_ + e->offset);
      sample->fields().reserve(4);  // one allocation for the usual 1-4 fields
    }
    if (reserved || sample->find(ext)) {
      // WebDataset's sample dict holds __key__, __url__ (and __local_path__) beside the
      // fields, so it refuses such a member as a duplicate too.
      Error dup(ErrorCode::corrupt_data, shard_->url, std::string(e->name),
                reserved ? "extension '" + ext + "' is the name of a sample's own metadata (" +
                               "__key__, __url__, __local_path__): the member is dropped"
                         : "duplicate extension '" + ext + "' in sample '" + sample->key() +
                               "' (the first is kept, this member dropped)");
      if (handler_(dup)) {
        detail::count_dropped(metrics_);
        continue;  // unread data is skipped by the reader
      }
      done_ = stopped_ = true;
      return std::nullopt;
    }
    Bytes data;
    try {
      data = read_member(reader_, *e);
    } catch (const Error& err) {
      return fail_shard(err, sample);
    } catch (const std::bad_alloc&) {
      return fail_shard(Error::unavailable(
                            shard_->url, std::string(e->name),
                            "out of memory for the member's " + std::to_string(e->size) + " bytes"),
                        sample);
    }
    sample->fields().push_back(Field{std::move(ext), std::move(data)});
  }
}

std::nullopt_t ShardSamples::fail_shard(const Error& error, const std::optional<Sample>& partial) {
  done_ = failed_ = true;
  std::string cause = error.cause();
  if (partial) {
    cause += "; the incomplete sample '" + partial->key() +
             "' (fields read: " + field_list(*partial) + ") was dropped";
  }
  const std::string& url = error.url().empty() ? shard_->url : error.url();
  if (handler_(Error(error.code(), url, error.member(), cause))) {
    detail::count_dropped(metrics_);
  } else {
    stopped_ = true;
  }
  return std::nullopt;
}

std::size_t default_read_ahead() {
  static const std::size_t value = [] {
    const std::optional<std::uint64_t> v = env_number("WDS_READ_AHEAD");
    return v ? static_cast<std::size_t>(*v) : std::size_t{2};
  }();
  return value;
}

TarSamples::TarSamples(std::vector<std::string> urls, TarSamplesOptions options)
    : TarSamples(
          [urls = std::move(urls), i = std::size_t{0}]() mutable -> std::optional<std::string> {
            if (i >= urls.size()) return std::nullopt;
            return std::move(urls[i++]);
          },
          std::move(options)) {}

TarSamples::TarSamples(UrlSource next_url, TarSamplesOptions options)
    : next_url_(std::move(next_url)), options_(std::move(options)) {
  if (!options_.handler) options_.handler = reraise_exception;
  if (options_.interleave == 0) {
    throw Error::invalid_argument(
        "interleave: 0 shards at once reads nothing; 1 reads shards one after another");
  }
  slots_.resize(options_.interleave);
}

ReopenedShard reopen_at(const std::string& url, std::uint64_t offset, const std::string& key,
                        const OpenOptions& open, TarReaderOptions tar, MetricsCounters* metrics) {
  if (key.empty()) {
    ReopenedShard out{std::make_unique<ShardSamples>(open_counted(url, open, metrics),
                                                     reraise_exception, tar, 0, metrics),
                      std::nullopt};
    count_shard(metrics, url);
    return out;
  }
  // Seeking: a plain tar on a source that can start at an offset. Anything that goes wrong
  // there (a source that cannot seek, compressed bytes, a different sample) falls back to
  // reading from the start.
  if (offset > 0) {
    try {
      OpenOptions at = open;
      at.offset = offset;
      auto shard = std::make_unique<ShardSamples>(open_counted(url, at, metrics), reraise_exception,
                                                  tar, offset, metrics);
      std::optional<Sample> first = shard->next();
      if (first && first->key() == key && first->offset() == offset) {
        count_shard(metrics, url);
        return {std::move(shard), std::move(first)};
      }
    } catch (const Error&) {
    }
  }
  auto shard = std::make_unique<ShardSamples>(open_counted(url, open, metrics), reraise_exception,
                                              tar, 0, metrics);
  while (std::optional<Sample> s = shard->next()) {
    if (s->offset() == offset && s->key() == key) {
      count_shard(metrics, url);
      return {std::move(shard), std::move(s)};
    }
    if (s->offset() > offset) break;
  }
  throw Error::corrupt_data(url, key,
                            "no sample '" + key + "' starts at byte " + std::to_string(offset) +
                                " any more: the shard changed since the state was saved");
}

void save_item(StateWriter& out, const Sample& sample) {
  out.put(sample.url());
  out.put(sample.offset());
  out.put(sample.key());
  if (!sample.columns().empty()) {
    std::vector<std::uint64_t> offsets;
    for (const ColumnLocation& c : sample.columns()) offsets.push_back(c.offset);
    save_column_offsets(out, offsets);
  }
}

namespace {
constexpr std::size_t kBufferedSampleRead = std::size_t{64} << 10;
}  // namespace

void load_item(StateReader& in, Sample& sample) {
  std::string url = in.get_string();
  in.check_shard_url(url);
  std::uint64_t offset = in.get_u64();
  std::string key = in.get_string();
  // An empty key means "a shard from its start" to reopen_at, which then returns no sample: a
  // buffered sample always has one, so a state without is malformed (or hostile).
  if (key.empty()) {
    throw Error::invalid_argument(
        url, "", "pipeline state holds a buffered sample without a key: malformed state");
  }
  const ShardOpening* how = in.shard_opening();
  // One sample is read, not the shard: a small first read instead of the 1 MiB a stream of
  // samples wants (restoring 10,000 buffered samples of tiny shards read ~10 GB otherwise).
  OpenOptions open = how ? how->open : OpenOptions{};
  open.buffer_size = std::min(open.buffer_size, kBufferedSampleRead);
  if (how && how->join) {
    sample =
        std::move(*reopen_joined(*how->join, url, offset, key, load_column_offsets(in, *how->join),
                                 open, how->tar, how->metrics)
                       .sample);
    return;
  }
  sample = std::move(*(how ? reopen_at(url, offset, key, open, how->tar, how->metrics)
                           : reopen_at(url, offset, key, open))
                          .sample);
}

std::vector<std::optional<TarSamples::Position>> TarSamples::positions() const {
  std::vector<std::optional<Position>> out;
  out.reserve(slots_.size());
  for (const Slot& slot : slots_) {
    std::optional<Position>& at = out.emplace_back();
    if (!slot.shard) continue;
    if (slot.stashed) {
      at = Position{slot.shard->url(), slot.stashed->offset(), slot.stashed->key(), {}};
      for (const ColumnLocation& c : slot.stashed->columns()) at->columns.push_back(c.offset);
    } else if (auto point = slot.shard->resume_point()) {
      at = Position{slot.shard->url(), point->first, point->second, slot.shard->column_offsets()};
    }
  }
  return out;
}

std::optional<TarSamples::Position> TarSamples::position() const {
  if (slots_.size() != 1) {
    throw Error::invalid_argument("TarSamples::position() is for interleave 1; with " +
                                  std::to_string(slots_.size()) + " use positions()");
  }
  return positions().front();
}

std::vector<std::string> TarSamples::read_ahead_urls() const {
  std::vector<std::string> urls;
  for (const Ahead& a : ahead_) urls.push_back(a.url);
  return urls;
}

void TarSamples::resume_read_ahead(std::vector<std::string> urls) {
  // Only the first set's URLs are saved: their partners follow from the join, and are opened
  // ahead again with them.
  for (auto it = urls.rbegin(); it != urls.rend(); ++it) {
    ahead_.push_front(Ahead{std::move(*it), {}, {}, false});
  }
}

TarSamples::Opened TarSamples::open_ahead(const std::string& url) const {
  Opened out;
  // Local files gain nothing from being opened early.
  std::shared_ptr<const Backend> backend = find_backend(url_scheme(url));
  if (!backend || backend->local) return out;
  try {
    out.source = open_counted(url, options_.open, options_.metrics);
  } catch (const Error&) {
    out.error = std::current_exception();
  }
  return out;
}

void TarSamples::read_ahead() {
  while (ahead_.size() < options_.read_ahead) {
    std::optional<std::string> url = next_url_();
    if (!url) break;
    ahead_.push_back(Ahead{std::move(*url), {}, {}, false});
  }
  std::size_t n = 0;
  for (Ahead& a : ahead_) {
    if (n++ >= options_.read_ahead) break;  // restored URLs beyond the depth wait their turn
    if (a.tried) continue;
    a.tried = true;
    a.first = open_ahead(a.url);
    if (!options_.join) continue;
    // A joined shard switches to all its partners at once: each waits for its first byte unless
    // it too was opened ahead.
    std::vector<std::string> partners;
    try {
      partners = options_.join->partners(a.url);
    } catch (const Error&) {
      continue;  // not a shard of the first set: join_partners reports it at its turn
    }
    a.partners.reserve(partners.size());
    for (const std::string& url : partners) a.partners.push_back(open_ahead(url));
  }
}

void TarSamples::resume(const Position& position) {
  if (slots_.size() != 1) {
    throw Error::invalid_argument("TarSamples::resume(Position) is for interleave 1; with " +
                                  std::to_string(slots_.size()) + " use resume(positions, turn)");
  }
  resume({position}, 0);
}

void TarSamples::resume(const std::vector<std::optional<Position>>& positions, std::size_t turn) {
  if (positions.size() != slots_.size() || turn >= slots_.size()) {
    throw Error::invalid_argument("resume: " + std::to_string(positions.size()) +
                                  " shard positions and turn " + std::to_string(turn) +
                                  " for interleave " + std::to_string(slots_.size()) +
                                  " (saved with another interleave?)");
  }
  turn_ = turn;
  bool reopened = false;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (!positions[i]) continue;
    const Position& at = *positions[i];
    ReopenedShard shard =
        options_.join
            ? reopen_joined(*options_.join, at.url, at.offset, at.key, at.columns, options_.open,
                            options_.tar, options_.metrics)
            : reopen_at(at.url, at.offset, at.key, options_.open, options_.tar, options_.metrics);
    slots_[i].shard = std::move(shard.shard);
    slots_[i].shard->set_handler(options_.handler);  // errors later in the shard go to ours
    slots_[i].stashed = std::move(shard.sample);
    ++opened_;
    reopened = true;
  }
  if (reopened) read_ahead();
}

std::optional<Sample> TarSamples::next() {
  MetricsCounters* metrics = options_.metrics;
  const std::size_t k = slots_.size();
  std::size_t idle = 0;  // turns in a row that found no shard and no URL
  while (!stopped_ && idle < k) {
    Slot& slot = slots_[turn_];
    if (slot.stashed) {
      turn_ = (turn_ + 1) % k;
      if (metrics) metrics->add_samples(1);
      return std::exchange(slot.stashed, std::nullopt);
    }
    if (!slot.shard) {
      std::optional<std::string> url;
      Ahead ahead;
      if (!ahead_.empty()) {
        ahead = std::move(ahead_.front());
        ahead_.pop_front();
        url = ahead.url;
      } else {
        url = next_url_();
      }
      if (!url) {  // the slot is passed over
        ++idle;
        turn_ = (turn_ + 1) % k;
        continue;
      }
      try {
        if (ahead.first.error) std::rethrow_exception(ahead.first.error);
        std::unique_ptr<ByteSource> source = ahead.first.source
                                                 ? std::move(ahead.first.source)
                                                 : open_counted(*url, options_.open, metrics);
        slot.shard = std::make_unique<ShardSamples>(std::move(source), options_.handler,
                                                    options_.tar, 0, metrics);
        if (options_.join) {
          join_partners(*slot.shard, *options_.join, options_.tar, metrics,
                        [&](std::size_t c, const std::string& partner) {
                          if (c < ahead.partners.size()) {
                            Opened& opened = ahead.partners[c];
                            if (opened.error) std::rethrow_exception(opened.error);
                            if (opened.source) return std::move(opened.source);
                          }
                          return open_counted(partner, options_.open, metrics);
                        });
        }
        ++opened_;
        count_shard(metrics, *url);
      } catch (const Error& e) {
        ++failed_;
        if (options_.handler(e)) {
          detail::count_dropped(metrics);
        } else {
          stopped_ = true;
        }
        continue;  // the same slot takes the next URL
      }
      read_ahead();  // the next shards open while this one is read
    }
    if (std::optional<Sample> s = slot.shard->next()) {
      turn_ = (turn_ + 1) % k;
      if (metrics) metrics->add_samples(1);
      return s;
    }
    // Ended (or failed): the slot takes the next URL in this same turn.
    if (slot.shard->failed()) ++failed_;
    if (slot.shard->stopped()) stopped_ = true;
    slot.shard.reset();
  }
  return std::nullopt;
}

}  // namespace wds
