// Canonical streams: the source that deals each epoch's shards to C streams and hands out this
// consumer's streams in global order, and the merging of states saved by consumers.
#include "wds/streams.hpp"

#include <algorithm>
#include <charconv>
#include <map>

#include "wds/error.hpp"
#include "wds/filters.hpp"
#include "wds/loader.hpp"
#include "wds/random.hpp"
#include "wds/shardlists.hpp"
#include "wds/split.hpp"

namespace wds {
namespace {

constexpr std::string_view kSectionTag = "canonical-streams-1";

std::string join_numbers(const std::vector<std::uint64_t>& v, std::size_t limit = 12) {
  std::string out;
  for (std::size_t i = 0; i < v.size() && i < limit; ++i) {
    out += (i == 0 ? "" : i + 1 == v.size() ? " or " : ", ") + std::to_string(v[i]);
  }
  if (v.size() > limit) out += ", ...";
  return out;
}

// The shards stream `stream` of `count` reads in an epoch: every count-th of the epoch's order.
class StreamShards final : public Stream<std::string> {
 public:
  StreamShards(std::shared_ptr<const std::vector<std::string>> urls, std::uint64_t count,
               std::uint64_t stream, bool shuffle)
      : urls_(std::move(urls)), count_(count), stream_(stream), shuffle_(shuffle) {}
  void start(const PassContext& ctx) override {
    // ShardList's order: the same on every consumer.
    const std::vector<std::size_t> order =
        epoch_shard_order(urls_->size(), shuffle_, ctx.seed, ctx.epoch);
    mine_.clear();
    for (std::size_t i = static_cast<std::size_t>(stream_); i < order.size();
         i += static_cast<std::size_t>(count_)) {
      mine_.push_back(order[i]);
    }
    pos_ = 0;
  }
  std::optional<std::string> next() override {
    if (pos_ >= mine_.size()) return std::nullopt;
    return (*urls_)[mine_[pos_++]];
  }
  void save(StateWriter& out) const override { out.put(static_cast<std::uint64_t>(pos_)); }
  void restore(StateReader& in) override {
    in.add_shard_urls(urls_);
    const std::uint64_t pos = in.get_u64();
    if (pos > mine_.size()) {
      throw Error::invalid_argument("canonical streams: the state puts stream " +
                                    std::to_string(stream_) + " at shard " + std::to_string(pos) +
                                    " of its " + std::to_string(mine_.size()) +
                                    ": it was saved with other shards");
    }
    pos_ = static_cast<std::size_t>(pos);
    std::vector<std::string_view> handed_out;
    for (std::size_t i = 0; i < pos_; ++i) handed_out.push_back((*urls_)[mine_[i]]);
    in.set_handed_out(std::move(handed_out), "stream " + std::to_string(stream_) +
                                                 "'s shards at position " + std::to_string(pos_));
  }

 private:
  std::shared_ptr<const std::vector<std::string>> urls_;
  std::uint64_t count_;
  std::uint64_t stream_;
  bool shuffle_;
  std::vector<std::size_t> mine_;
  std::size_t pos_ = 0;
};

// One stream as the state holds it.
struct SavedStream {
  std::uint64_t id = 0;
  std::uint64_t handed_out = 0;  // samples, as of the state
  std::uint64_t skip = 0;        // samples to replay after restoring `chain`
  bool ended = false;
  std::string chain;  // the stream's stages' state (when `skip` samples ago)
};

struct Section {
  std::uint64_t count = 0;
  std::vector<SavedStream> streams;
};

std::string encode_section(const Section& s) {
  StateWriter out;
  out.put(kSectionTag);
  out.put(s.count);
  out.put(static_cast<std::uint64_t>(s.streams.size()));
  for (const SavedStream& st : s.streams) {
    out.put(st.id);
    out.put(st.handed_out);
    out.put(st.skip);
    out.put(st.ended);
    out.put(std::string_view(st.chain));
  }
  return out.str();
}

// Nested in a pipeline state, which the caller verified (or which has no checksum).
// Checked: the stream count against the pipeline's (restore()), each id below it and given
// once, a stream's skip within its count. A stream's count of samples handed out orders it
// among the consumer's streams: any number is a place a stream can be at (streams moved between
// consumers by merge_states differ by any amount), so only the checksum protects it.
Section decode_section(std::string_view text) {
  StateReader in(text, StateCheck::verified);
  if (in.get_string() != kSectionTag)
    throw Error::invalid_argument("canonical streams: malformed stream state");
  Section s;
  s.count = in.get_u64();
  const std::uint64_t n = in.get_u64();
  if (n > s.count)
    throw Error::invalid_argument("canonical streams: the state holds more streams than its count");
  for (std::uint64_t i = 0; i < n; ++i) {
    SavedStream st;
    st.id = in.get_u64();
    st.handed_out = in.get_u64();
    st.skip = in.get_u64();
    st.ended = in.get_bool();
    st.chain = in.get_string();
    if (st.id >= s.count || st.skip > st.handed_out) {
      throw Error::invalid_argument("canonical streams: malformed state of stream " +
                                    std::to_string(st.id));
    }
    // An ended stream's stages are not saved (its chain is empty, or no state at all when
    // merge_states adds it): values there mean the flag is wrong.
    if (st.ended && !st.chain.empty() && !StateReader(st.chain, StateCheck::verified).at_end()) {
      throw Error::invalid_argument(
          "canonical streams: stream " + std::to_string(st.id) +
          " is marked ended, yet its stages' state holds values: malformed state");
    }
    for (const SavedStream& other : s.streams) {
      if (other.id == st.id) {
        throw Error::invalid_argument("canonical streams: the state holds stream " +
                                      std::to_string(st.id) + " twice: malformed state");
      }
    }
    s.streams.push_back(std::move(st));
  }
  if (!in.at_end())
    throw Error::invalid_argument("canonical streams: the stream state has trailing values");
  return s;
}

// The stage CanonicalStreams() makes: the samples of the streams this consumer owns, interleaved
// in the global order (the next sample is the live stream's whose global position comes first).
class InterleavedStreams final : public Stream<Sample> {
 public:
  InterleavedStreams(std::shared_ptr<const std::vector<std::string>> urls, StreamsOptions options)
      : urls_(std::move(urls)), options_(std::move(options)) {}

  void start(const PassContext& ctx) override {
    ctx_ = ctx;
    const std::vector<std::uint64_t> ids =
        owned_streams(options_.count, ctx.rank, ctx.world_size, ctx.worker, ctx.num_workers);
    streams_.clear();
    for (std::uint64_t id : ids) {
      Owned s;
      s.id = id;
      s.chain = make_chain(id, ctx.continuous);
      s.chain->start(stream_context(id));
      streams_.push_back(std::move(s));
    }
    publish_counts();
  }

  std::optional<Sample> next() override {
    for (;;) {
      // The live stream whose next sample comes first in the global order.
      Owned* best = nullptr;
      for (Owned& s : streams_) {
        if (s.ended) continue;
        if (!best || position(s) < position(*best)) best = &s;
      }
      if (!best) return std::nullopt;
      if (std::optional<Sample> item = best->chain->next()) {
        ++best->handed_out;
        if (ctx_.stream_counts) {
          (*ctx_.stream_counts)[static_cast<std::size_t>(best - streams_.data())] =
              best->handed_out;
        }
        return item;
      }
      best->ended = true;
    }
  }

  void save(StateWriter& out) const override {
    Section s;
    s.count = options_.count;
    for (const Owned& o : streams_) {
      StateWriter chain;
      if (!o.ended) o.chain->save(chain);
      s.streams.push_back({o.id, o.handed_out, 0, o.ended, chain.str()});
    }
    out.put(std::string_view(encode_section(s)));
  }

  void restore(StateReader& in) override {
    Section s = decode_section(in.get_string());
    if (s.count != options_.count) {
      throw Error::invalid_argument("canonical streams: the state has " + std::to_string(s.count) +
                                    " streams, this pipeline " + std::to_string(options_.count));
    }
    std::map<std::uint64_t, SavedStream*> by_id;
    for (SavedStream& st : s.streams) by_id[st.id] = &st;
    std::vector<std::uint64_t> missing;
    for (const Owned& o : streams_) {
      if (!by_id.count(o.id)) missing.push_back(o.id);
    }
    if (!missing.empty()) {
      throw Error::invalid_argument(
          "canonical streams: the state lacks stream" +
          std::string(missing.size() > 1 ? "s " : " ") + join_numbers(missing) +
          " of this consumer (rank " + std::to_string(ctx_.rank) + ", worker " +
          std::to_string(ctx_.worker) +
          "): restore from the states of all ranks put together with wds::merge_states");
    }
    auto urls = urls_;
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      Owned& o = streams_[i];
      SavedStream& st = *by_id[o.id];
      o.handed_out = st.handed_out;
      o.ended = st.ended;
      if (o.ended) continue;
      StateReader chain(st.chain, StateCheck::verified);  // inside the verified state
      chain.add_shard_urls(urls);
      o.chain->restore(chain);
      if (!chain.at_end()) {
        throw Error::invalid_argument(
            "canonical streams: stream " + std::to_string(o.id) +
            "'s state has values its stages do not read: saved by another configuration");
      }
      // A Loader's worker saved the stream a few samples before the items it had handed out.
      for (std::uint64_t k = 0; k < st.skip; ++k) {
        if (!o.chain->next()) {
          throw Error::invalid_argument(
              "canonical streams: stream " + std::to_string(o.id) + " ended " +
              std::to_string(st.skip - k) +
              " samples before its saved position: the shards changed since it was saved");
        }
      }
    }
    publish_counts();
  }

  void describe(Configuration& c, const PassContext&) const override {
    c.set_elastic();
    c.stage("CanonicalStreams");
    c.add_list("urls", *urls_);
    c.add("streams", options_.count);
    c.add("shuffle_shards", options_.shuffle_shards ? 1 : 0);
    c.add("shuffle", options_.shuffle);
    c.add("shuffle_initial", options_.shuffle_initial);
    // Each stream's order and state layout depend on it; 1 is left out so older states restore.
    if (options_.read.interleave > 1) c.add("interleave", options_.read.interleave);
  }

 private:
  struct Owned {
    std::uint64_t id = 0;
    StreamPtr<Sample> chain;
    std::uint64_t handed_out = 0;
    bool ended = false;
  };

  std::uint64_t position(const Owned& s) const { return s.handed_out * options_.count + s.id; }

  PassContext stream_context(std::uint64_t id) const {
    PassContext c = ctx_;
    c.rank = static_cast<int>(id);
    c.world_size = static_cast<int>(options_.count);
    c.worker = 0;
    c.num_workers = 1;
    c.continuous = false;
    c.stream_counts = nullptr;
    return c;
  }

  StreamPtr<Sample> make_chain(std::uint64_t id, bool continuous) const {
    StreamPtr<std::string> shards =
        std::make_unique<StreamShards>(urls_, options_.count, id, options_.shuffle_shards);
    StreamPtr<Sample> chain = tar_samples(options_.read)(std::move(shards));
    if (options_.shuffle > 0) {
      chain = wds::shuffle(options_.shuffle, options_.shuffle_initial)(std::move(chain));
    }
    // Each epoch's shards of the stream, then the next epoch's: the stream never ends (unless
    // an epoch of it holds no sample).
    if (continuous) chain = wds::repeat()(std::move(chain));
    return chain;
  }

  void publish_counts() {
    if (!ctx_.stream_counts) return;
    ctx_.stream_counts->resize(streams_.size());
    for (std::size_t i = 0; i < streams_.size(); ++i) {
      (*ctx_.stream_counts)[i] = streams_[i].handed_out;
    }
  }

  std::shared_ptr<const std::vector<std::string>> urls_;
  StreamsOptions options_;
  PassContext ctx_;
  std::vector<Owned> streams_;
};

// --- reading and writing whole states ---

// A pipeline state (Pipeline::state()) of a canonical-streams pipeline: its header values and
// its streams.
struct ConsumerState {
  std::string config;
  std::uint64_t epoch = 0;
  std::uint64_t yielded = 0;
  bool in_pass = false;
  bool chain = false;
  std::uint64_t stream_epoch = 0;
  Section section;
};

// Verifies the checksum of the state and names it if damaged.
StateReader open_state(std::string_view text, const std::string& name, StateCheck check) {
  try {
    return StateReader(text, check);
  } catch (const Error& e) {
    throw Error::invalid_argument(name + ": " + e.cause());
  }
}

ConsumerState parse_pipeline_state(std::string_view text, const std::string& name,
                                   StateCheck check) {
  ConsumerState c;
  StateReader in = open_state(text, name, check);
  c.config = in.get_string();
  c.epoch = in.get_u64();
  c.yielded = in.get_u64();
  c.in_pass = in.get_bool();
  c.chain = in.get_bool();
  if (c.chain) {
    c.stream_epoch = in.get_u64();
    std::string section;
    try {
      section = in.get_string();
    } catch (const Error&) {
      section.clear();
    }
    const std::string tag =
        " s" + std::to_string(kSectionTag.size()) + ":" + std::string(kSectionTag);
    if (section.rfind(std::string(kStateHeader) + tag, 0) != 0 &&
        section.rfind(std::string(kStateHeaderUnsealed) + tag, 0) != 0) {
      throw Error::invalid_argument(
          name +
          " is not the state of a pipeline with canonical streams (WebDatasetOptions::streams) "
          "at its source");
    }
    c.section = decode_section(section);
  }
  if (!in.at_end()) {
    throw Error::invalid_argument(
        name +
        " holds values of stages after the canonical streams (a shuffle(), slice() or "
        "another stage that holds items between calls): only the streams' states can move "
        "between consumers; shuffle with WebDatasetOptions::stream_shuffle instead");
  }
  return c;
}

// The states one input holds: a pipeline state, or a Loader state (one per worker, each from the
// worker's snapshot and its streams' counts as of the items handed out).
std::vector<ConsumerState> parse_any_state(std::string_view text, const std::string& name) {
  if (!detail::is_loader_state(text)) {
    return {parse_pipeline_state(text, name, StateCheck::verify)};
  }
  (void)open_state(text, name, StateCheck::verify);  // once: what it holds is covered
  detail::LoaderState loader =
      detail::LoaderState::decode(text, std::nullopt, StateCheck::verified);
  std::vector<ConsumerState> out;
  for (std::size_t w = 0; w < loader.workers.size(); ++w) {
    const detail::WorkerPosition& p = loader.workers[w];
    const std::string who = name + " (worker " + std::to_string(w) + ")";
    if (!p.snapshot) throw Error::invalid_argument(who + " has no position");
    ConsumerState c =
        parse_pipeline_state(detail::decode_snapshot(*p.snapshot).first, who, StateCheck::verified);
    // The loader's pass, not the worker pipeline's, is what the ranks step through.
    c.yielded = loader.epoch_yielded;
    c.in_pass = loader.in_pass;
    if (c.chain) {
      if (p.skip > 0 && p.stream_counts.size() != c.section.streams.size()) {
        throw Error::invalid_argument(
            who + " does not say where its streams are (saved by an older wds)");
      }
      if (p.stream_counts.size() == c.section.streams.size()) {
        for (std::size_t i = 0; i < c.section.streams.size(); ++i) {
          SavedStream& st = c.section.streams[i];
          if (p.stream_counts[i] < st.handed_out)
            throw Error::invalid_argument(who + " is malformed");
          st.skip += p.stream_counts[i] - st.handed_out;
          st.handed_out = p.stream_counts[i];
        }
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The configuration's job values (what every rank shares), one per line.
std::string job_values(std::string_view config) {
  std::string out;
  while (!config.empty()) {
    std::size_t nl = config.find('\n');
    std::string_view line = config.substr(0, nl);
    config = nl == std::string_view::npos ? std::string_view() : config.substr(nl + 1);
    if (line.rfind("s ", 0) == 0 || line.rfind("c ", 0) == 0) continue;
    out += line;
    out += '\n';
  }
  return out;
}

}  // namespace

std::vector<std::uint64_t> owned_streams(std::uint64_t count, int rank, int world_size, int worker,
                                         int num_workers) {
  if (count == 0)
    throw Error::invalid_argument("canonical streams: the number of streams must be at least 1");
  if (world_size < 1 || num_workers < 1 || rank < 0 || rank >= world_size || worker < 0 ||
      worker >= num_workers) {
    throw Error::invalid_argument("canonical streams: rank " + std::to_string(rank) + " of " +
                                  std::to_string(world_size) + ", worker " +
                                  std::to_string(worker) + " of " + std::to_string(num_workers) +
                                  " is not a consumer");
  }
  const std::uint64_t n =
      static_cast<std::uint64_t>(world_size) * static_cast<std::uint64_t>(num_workers);
  if (count % n != 0) {
    std::vector<std::uint64_t> sizes;
    for (std::uint64_t d = 1; d <= count; ++d) {
      if (count % d == 0) sizes.push_back(d);
    }
    throw Error::invalid_argument(
        "canonical streams: " + std::to_string(count) + " streams cannot be shared by " +
        std::to_string(n) + " consumers (" + std::to_string(world_size) + " ranks x " +
        std::to_string(num_workers) + " workers): ranks x workers must divide the number " +
        "of streams, so with " + std::to_string(count) + " streams it may be " +
        join_numbers(sizes) + "; for " + std::to_string(n) + " consumers, use a multiple of " +
        std::to_string(n) + " streams");
  }
  const std::uint64_t k =
      static_cast<std::uint64_t>(worker) * static_cast<std::uint64_t>(world_size) +
      static_cast<std::uint64_t>(rank);
  std::vector<std::uint64_t> out;
  for (std::uint64_t c = k; c < count; c += n) out.push_back(c);
  return out;
}

Pipeline<Sample> CanonicalStreams(std::vector<std::string> urls, StreamsOptions options) {
  if (urls.empty()) throw Error::invalid_argument("CanonicalStreams: no shard URLs");
  if (options.count == 0)
    throw Error::invalid_argument("canonical streams: the number of streams must be at least 1");
  if (options.count > urls.size()) {
    throw Error::invalid_argument("canonical streams: " + std::to_string(options.count) +
                                  " streams need at least as "
                                  "many shards, and there are " +
                                  std::to_string(urls.size()) +
                                  " (each stream reads at least one shard per epoch)");
  }
  const DistributedInfo who = detect_distributed(options.distributed);
  // A job whose ranks alone cannot share the streams is refused now; workers are checked when
  // a loader starts them.
  owned_streams(options.count, who.rank, who.world_size);
  PassContext ctx;
  ctx.seed = options.seed ? *options.seed : default_seed();
  ctx.rank = who.rank;
  ctx.world_size = who.world_size;
  auto list = std::make_shared<const std::vector<std::string>>(std::move(urls));
  return Pipeline<Sample>(
      [list, options] { return std::make_unique<InterleavedStreams>(list, options); }, ctx);
}

namespace {

// A configuration value by its key's end ("pipeline.rank"), from a configuration record.
std::optional<std::uint64_t> config_number(std::string_view config, std::string_view key) {
  while (!config.empty()) {
    std::size_t nl = config.find('\n');
    std::string_view line = config.substr(0, nl);
    config = nl == std::string_view::npos ? std::string_view() : config.substr(nl + 1);
    std::size_t eq = line.find('=');
    if (eq == std::string_view::npos || eq < key.size()) continue;
    if (line.substr(eq - key.size(), key.size()) != key) continue;
    std::uint64_t v = 0;
    std::string_view text = line.substr(eq + 1);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec == std::errc() && end == text.data() + text.size()) return v;
  }
  return std::nullopt;
}

// The streams of a consumer whose pass has ended (its state no longer lists them): all ended.
void add_ended_streams(const ConsumerState& c, std::map<std::uint64_t, SavedStream>& merged) {
  auto get = [&](std::string_view key) {
    std::optional<std::uint64_t> v = config_number(c.config, key);
    if (!v)
      throw Error::invalid_argument("merge_states: a state's configuration lacks " +
                                    std::string(key));
    return *v;
  };
  const std::uint64_t count = get("CanonicalStreams.streams");
  for (std::uint64_t id : owned_streams(count, static_cast<int>(get("pipeline.rank")),
                                        static_cast<int>(get("pipeline.world_size")),
                                        static_cast<int>(get("pipeline.worker")),
                                        static_cast<int>(get("pipeline.num_workers")))) {
    SavedStream st;
    st.id = id;
    st.ended = true;
    if (!merged.emplace(id, st).second) {
      throw Error::invalid_argument("merge_states: stream " + std::to_string(id) +
                                    " is in two of the states");
    }
  }
}

}  // namespace

std::string merge_states(const std::vector<std::string>& states) {
  if (states.empty()) throw Error::invalid_argument("merge_states: no states");
  std::vector<ConsumerState> all;
  for (std::size_t i = 0; i < states.size(); ++i) {
    for (ConsumerState& c : parse_any_state(states[i], "state " + std::to_string(i + 1))) {
      all.push_back(std::move(c));
    }
  }
  auto differ = [&](const char* what, std::uint64_t a, std::uint64_t b) {
    if (a != b) {
      throw Error::invalid_argument(
          "merge_states: the states were not saved at one step of one job: " + std::string(what) +
          " " + std::to_string(a) + " in one, " + std::to_string(b) + " in another");
    }
  };
  // The header comes from a consumer in the pass, if any: one whose pass ended (all its streams
  // ended, in a pass without with_epoch) has no streams to give, only their end.
  const ConsumerState* lead = &all.front();
  for (const ConsumerState& c : all) {
    if (c.chain) {
      lead = &c;
      break;
    }
  }
  const std::string lead_job = job_values(lead->config);
  std::map<std::uint64_t, SavedStream> merged;
  std::uint64_t yielded = lead->yielded;
  for (const ConsumerState& c : all) {
    if (job_values(c.config) != lead_job) {
      throw Error::invalid_argument(
          "merge_states: the states were saved by pipelines of different configurations "
          "(seed, shards, streams or stages differ)");
    }
    differ("epoch", lead->epoch, c.epoch);
    if (!c.chain) {
      if (lead->chain) {
        if (c.in_pass) differ("pass started", 1, 0);
        add_ended_streams(c, merged);
      }
      continue;
    }
    differ("epoch of the streams", lead->stream_epoch, c.stream_epoch);
    // Ranks step together: with with_epoch, every consumer in the pass has yielded as many.
    if (c.in_pass && lead->in_pass) differ("items in the pass", lead->yielded, c.yielded);
    yielded = std::max(yielded, c.yielded);
    for (const SavedStream& st : c.section.streams) {
      if (!merged.emplace(st.id, st).second) {
        throw Error::invalid_argument(
            "merge_states: stream " + std::to_string(st.id) +
            " is in two of the states (the same rank's state given twice?)");
      }
    }
  }
  bool in_pass = false;
  for (const ConsumerState& c : all) in_pass = in_pass || c.in_pass;
  StateWriter out;
  out.put(std::string_view(lead->config));
  out.put(lead->epoch);
  out.put(yielded);
  out.put(in_pass);
  out.put(lead->chain);
  if (lead->chain) {
    out.put(lead->stream_epoch);
    Section s;
    s.count = lead->section.count;
    for (auto& [id, st] : merged) s.streams.push_back(std::move(st));
    out.put(std::string_view(encode_section(s)));
  }
  return out.str();
}

StreamsStateSummary summarize_streams_state(std::string_view state) {
  StreamsStateSummary out;
  for (const ConsumerState& c : parse_any_state(state, "the state")) {
    out.epoch = c.stream_epoch;
    out.items_in_pass = c.yielded;
    if (!c.chain) continue;
    out.count = c.section.count;
    for (const SavedStream& st : c.section.streams) out.streams.push_back(st.id);
  }
  std::sort(out.streams.begin(), out.streams.end());
  return out;
}

}  // namespace wds
