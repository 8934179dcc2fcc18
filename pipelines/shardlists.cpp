// Shard sources, shard splitting stages and the tar-to-samples stage.
#include "wds/shardlists.hpp"

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "lib/tar/joined.hpp"
#include "wds/brace.hpp"
#include "wds/error.hpp"
#include "wds/random.hpp"

namespace wds {
namespace {

std::size_t checked_position(std::uint64_t pos, std::size_t size) {
  if (pos > size) {
    throw Error::invalid_argument("pipeline state names position " + std::to_string(pos) +
                                  " in a list of " + std::to_string(size) +
                                  " shards: it was saved with other shards or options");
  }
  return static_cast<std::size_t>(pos);
}

// A stage that, at the start of each pass, takes the whole upstream list and then hands out a
// list computed from it (splitters need the count to apply their policy).
class ListStream final : public StreamWrapper<std::string> {
 public:
  using Transform =
      std::function<std::vector<std::string>(std::vector<std::string>, const PassContext&)>;
  ListStream(StreamPtr<std::string> up, Transform transform, std::string name,
             std::vector<std::pair<std::string, std::string>> settings = {})
      : StreamWrapper(std::move(up), std::move(name)),
        transform_(std::move(transform)),
        settings_(std::move(settings)) {}
  void settings(Configuration& c) const override {
    for (const auto& [key, value] : settings_) c.add(key, value);
  }

  void start(const PassContext& ctx) override {
    upstream().start(ctx);
    std::vector<std::string> all;
    // A shard list is finite; an endless source (ResampledShards) cannot be split by count.
    constexpr std::size_t kLimit = 100'000'000;
    while (std::optional<std::string> url = upstream().next()) {
      if (all.size() == kLimit) {
        throw Error::invalid_argument(
            "a shard splitter got more than 100,000,000 URLs: an endless source such as "
            "ResampledShards needs no splitter (each rank and worker draws its own)");
      }
      all.push_back(std::move(*url));
    }
    urls_ = transform_(std::move(all), ctx);
    pos_ = 0;
  }
  std::optional<std::string> next() override {
    if (pos_ >= urls_.size()) return std::nullopt;
    return urls_[pos_++];
  }
  // The list is recomputed by start(); only the position is state (the upstream was drained).
  // What the state names downstream must be among this consumer's shards.
  void save(StateWriter& out) const override { out.put(static_cast<std::uint64_t>(pos_)); }
  // The position: within the list (checked_position).
  void restore(StateReader& in) override {
    in.add_shard_urls(std::make_shared<const std::vector<std::string>>(urls_));
    pos_ = checked_position(in.get_u64(), urls_.size());
    in.set_handed_out({urls_.begin(), urls_.begin() + static_cast<std::ptrdiff_t>(pos_)},
                      name() + " at position " + std::to_string(pos_));
  }
  // Declines: it holds the whole list between calls (and its items are URLs).
  void offer_slots(detail::BatchSlots*) override {}

 private:
  Transform transform_;
  std::vector<std::pair<std::string, std::string>> settings_;
  std::vector<std::string> urls_;
  std::size_t pos_ = 0;
};

class ShardListStream final : public Stream<std::string> {
 public:
  ShardListStream(std::shared_ptr<const std::vector<std::string>> urls, bool shuffle)
      : urls_(std::move(urls)), shuffle_(shuffle) {}
  void start(const PassContext& ctx) override {
    order_ = epoch_shard_order(urls_->size(), shuffle_, ctx.seed, ctx.epoch);
    pos_ = 0;
  }
  std::optional<std::string> next() override {
    if (pos_ >= order_.size()) return std::nullopt;
    return (*urls_)[order_[pos_++]];
  }
  void save(StateWriter& out) const override { out.put(static_cast<std::uint64_t>(pos_)); }
  void restore(StateReader& in) override {
    in.add_shard_urls(urls_);
    pos_ = checked_position(in.get_u64(), order_.size());
    std::vector<std::string_view> handed_out;
    for (std::size_t i = 0; i < pos_; ++i) handed_out.push_back((*urls_)[order_[i]]);
    in.set_handed_out(std::move(handed_out), "ShardList at position " + std::to_string(pos_));
  }
  void describe(Configuration& c, const PassContext&) const override {
    c.stage("ShardList");
    c.add_list("urls", *urls_);
    c.add("shuffle", shuffle_ ? 1 : 0);
  }

 private:
  std::shared_ptr<const std::vector<std::string>> urls_;
  bool shuffle_;
  std::vector<std::size_t> order_;
  std::size_t pos_ = 0;
};

class ResampledStream final : public Stream<std::string> {
 public:
  ResampledStream(std::shared_ptr<const std::vector<std::string>> urls,
                  std::optional<std::uint64_t> nshards)
      : urls_(std::move(urls)), nshards_(nshards) {}
  void start(const PassContext& ctx) override {
    rng_ = Rng(derive_seed(ctx.seed,
                           {seed_purpose::resample, ctx.epoch, static_cast<std::uint64_t>(ctx.rank),
                            static_cast<std::uint64_t>(ctx.worker)}));
    drawn_ = 0;
  }
  std::optional<std::string> next() override {
    if (nshards_ && drawn_ >= *nshards_) return std::nullopt;
    ++drawn_;
    return (*urls_)[static_cast<std::size_t>(rng_.below(urls_->size()))];
  }
  void save(StateWriter& out) const override {
    save_item(out, rng_);
    out.put(drawn_);
  }
  // Checked: the generator's increment (load_item), the count drawn against nshards. The state
  // word, and the count of an endless source: only the checksum.
  void restore(StateReader& in) override {
    in.add_shard_urls(urls_);
    in.forget_handed_out();  // any shard of the list may have been drawn
    load_item(in, rng_);
    drawn_ = in.get_u64();
    if (nshards_ && drawn_ > *nshards_) {
      throw Error::invalid_argument("pipeline state: " + std::to_string(drawn_) +
                                    " shards drawn of " + std::to_string(*nshards_) +
                                    ": malformed state");
    }
  }
  void describe(Configuration& c, const PassContext&) const override {
    c.stage("ResampledShards");
    c.add_list("urls", *urls_);
    c.add("nshards", nshards_ ? std::to_string(*nshards_) : std::string("forever"));
  }

 private:
  std::shared_ptr<const std::vector<std::string>> urls_;
  std::optional<std::uint64_t> nshards_;
  Rng rng_;
  std::uint64_t drawn_ = 0;
};

class TarSamplesStream final : public StreamWrapper<std::string, Sample> {
 public:
  TarSamplesStream(StreamPtr<std::string> up, TarSamplesOptions options)
      : StreamWrapper(std::move(up), "tar_samples"), options_(std::move(options)) {}
  void start(const PassContext& ctx) override {
    upstream().start(ctx);
    TarSamplesOptions options = options_;
    if (ctx.metrics) options.metrics = ctx.metrics;  // the pipeline's counters, else the user's
    metrics_ = options.metrics;
    samples_ =
        std::make_unique<TarSamples>([up = &upstream()] { return up->next(); }, std::move(options));
  }
  std::optional<Sample> next() override { return samples_ ? samples_->next() : std::nullopt; }
  // The URL stream's position, then each slot's shard and where its next sample starts (one
  // slot without interleave), the turn (only with interleave: states of one slot keep their
  // layout), then the URLs read ahead.
  void save(StateWriter& out) const override {
    upstream().save(out);
    const std::vector<std::optional<TarSamples::Position>> slots =
        samples_ ? samples_->positions()
                 : std::vector<std::optional<TarSamples::Position>>(options_.interleave);
    for (const std::optional<TarSamples::Position>& at : slots) {
      out.put(at.has_value());
      if (at) {
        out.put(at->url);
        out.put(at->offset);
        out.put(at->key);
        if (options_.join) save_column_offsets(out, at->columns);
      }
    }
    if (options_.interleave > 1)
      out.put(static_cast<std::uint64_t>(samples_ ? samples_->turn() : 0));
    // URLs taken from upstream ahead of their turn (read-ahead): opened again on restore.
    std::vector<std::string> ahead =
        samples_ ? samples_->read_ahead_urls() : std::vector<std::string>{};
    out.put(static_cast<std::uint64_t>(ahead.size()));
    for (const std::string& url : ahead) out.put(url);
  }
  // How shards are opened and read (handler, transport, read-ahead) is not described: the
  // configuration has never held it, and old states must keep restoring. Interleave is, when
  // above 1: it changes the order and the state's layout, so a state of another is refused.
  // Joined shard sets are (only when set, so that other states are unchanged): they change
  // what a sample holds.
  void settings(Configuration& c) const override {
    if (options_.interleave > 1) c.add("interleave", options_.interleave);
    if (options_.join) describe_join(c, *options_.join);
  }
  void restore(StateReader& in) override {
    upstream().restore(in);
    in.shard_stages_done();  // strings buffered downstream are data, not URLs
    // For samples buffered downstream.
    in.set_shard_opening(std::make_shared<const ShardOpening>(
        ShardOpening{options_.open, options_.tar, metrics_, options_.join}));
    std::vector<std::optional<TarSamples::Position>> slots(options_.interleave);
    bool any = false;
    for (std::optional<TarSamples::Position>& at : slots) {
      if (!in.get_bool()) continue;
      at.emplace();
      at->url = in.get_string();
      in.check_shard_url(at->url);
      in.check_handed_out(at->url);
      at->offset = in.get_u64();
      at->key = in.get_string();
      if (options_.join) at->columns = load_column_offsets(in, *options_.join);
      any = true;
    }
    std::size_t turn = 0;
    if (options_.interleave > 1) {
      const std::uint64_t t = in.get_u64();
      if (t >= options_.interleave) {
        throw Error::invalid_argument("pipeline state: tar_samples' turn is slot " +
                                      std::to_string(t) + " of " +
                                      std::to_string(options_.interleave) + ": malformed state");
      }
      turn = static_cast<std::size_t>(t);
    }
    // Read one by one: a count from a hostile state must not size an allocation. Each URL must
    // be in the list; their number is not bounded by this pipeline's read-ahead (a state saved
    // with a deeper one restores: the extra URLs wait their turn), so only the checksum
    // protects it. The position (URL, offset, key) is checked by resume(): the shard must hold
    // that sample at that offset.
    std::vector<std::string> ahead;
    const std::uint64_t n_ahead = in.get_u64();
    for (std::uint64_t n = n_ahead; n > 0; --n) {
      ahead.push_back(in.get_string());
      in.check_shard_url(ahead.back());
      in.check_handed_out(ahead.back());
    }
    // Before resume(), which reads ahead again: these come first.
    samples_->resume_read_ahead(std::move(ahead));
    if (any || turn > 0) samples_->resume(slots, turn);
  }
  // Declines: it takes shard URLs, which nothing decodes.
  void offer_slots(detail::BatchSlots*) override {}

 private:
  TarSamplesOptions options_;
  MetricsCounters* metrics_ = nullptr;  // this pass's
  std::unique_ptr<TarSamples> samples_;
};

std::shared_ptr<const std::vector<std::string>> checked_urls(std::vector<std::string> urls,
                                                             const char* what) {
  if (urls.empty()) {
    throw Error::invalid_argument(std::string(what) + ": no shard URLs");
  }
  return std::make_shared<const std::vector<std::string>>(std::move(urls));
}

PassContext context_for(std::optional<std::uint64_t> seed, const DistributedOptions& dist) {
  DistributedInfo info = detect_distributed(dist);
  PassContext ctx;
  ctx.seed = seed ? *seed : default_seed();
  ctx.rank = info.rank;
  ctx.world_size = info.world_size;
  return ctx;
}

// The splitter behind split_by_node and split_by_worker.
SplitStage splitter(bool node, SplitOptions options) {
  auto split = [node, options](std::vector<std::string> all, const PassContext& ctx) {
    const int id = node ? ctx.rank : ctx.worker;
    const int count = node ? ctx.world_size : ctx.num_workers;
    const char* what = node ? "rank" : "worker";
    SplitPolicy policy = node ? choose_split_policy(options.policy, all.size(), count).policy
                         : options.policy ? *options.policy
                                          : SplitPolicy::unbalanced;
    ShardAssignment a = assign_shards(all.size(), id, count, policy, what);
    if (a.dropped > 0 && id == 0) {
      std::fprintf(stderr,
                   "wds: warning: split policy drop_last: %zu of %zu shards are read by no %s "
                   "in epoch %llu\n",
                   a.dropped, all.size(), what, static_cast<unsigned long long>(ctx.epoch));
    }
    if (a.indices.empty() && !options.allow_empty) {
      throw Error::invalid_argument(
          std::string(what) + " " + std::to_string(id) + " of " + std::to_string(count) +
          " gets no shard (" + std::to_string(all.size()) + " shards, policy " +
          std::string(to_string(policy)) +
          "): use fewer consumers, the replicate or split_samples policy, or "
          "allow_empty");
    }
    std::vector<std::string> mine;
    mine.reserve(a.indices.size());
    for (std::size_t k : a.indices) mine.push_back(std::move(all[k]));
    if (policy == SplitPolicy::replicate) {
      // Every consumer reads everything, each in its own order.
      Rng rng(derive_seed(ctx.seed,
                          {seed_purpose::replicate, ctx.epoch, static_cast<std::uint64_t>(ctx.rank),
                           node ? 0 : static_cast<std::uint64_t>(ctx.worker) + 1}));
      rng.shuffle(mine.begin(), mine.end());
    }
    return mine;
  };
  return {node ? "split_by_node" : "split_by_worker",
          std::move(split),
          {{"policy", options.policy ? std::string(to_string(*options.policy)) : "default"},
           {"allow_empty", options.allow_empty ? "1" : "0"}}};
}

}  // namespace

std::uint64_t default_seed() {
  const char* value = std::getenv("WDS_SEED");
  if (!value || !*value) return 0;
  std::uint64_t seed = 0;
  std::string_view v(value);
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), seed);
  if (ec != std::errc() || end != v.data() + v.size()) {
    throw Error::invalid_argument("WDS_SEED='" + std::string(v) +
                                  "' is not a non-negative whole number");
  }
  return seed;
}

Pipeline<std::string> ShardList(std::vector<std::string> urls, ShardListOptions options) {
  auto list = checked_urls(std::move(urls), "ShardList");
  bool shuffle = options.shuffle;
  return Pipeline<std::string>(
      [list, shuffle] { return std::make_unique<ShardListStream>(list, shuffle); },
      context_for(options.seed, options.distributed));
}

Pipeline<std::string> ShardList(std::string_view pattern, ShardListOptions options) {
  return ShardList(resolve_urls(pattern), std::move(options));
}

Pipeline<std::string> ResampledShards(std::vector<std::string> urls,
                                      ResampledShardsOptions options) {
  auto list = checked_urls(std::move(urls), "ResampledShards");
  auto nshards = options.nshards;
  return Pipeline<std::string>(
      [list, nshards] { return std::make_unique<ResampledStream>(list, nshards); },
      context_for(options.seed, options.distributed));
}

Pipeline<std::string> ResampledShards(std::string_view pattern, ResampledShardsOptions options) {
  return ResampledShards(resolve_urls(pattern), std::move(options));
}

StreamPtr<std::string> SplitStage::operator()(StreamPtr<std::string> up) const {
  return std::make_unique<ListStream>(std::move(up), split, name, settings);
}

SplitStage split_by_node(SplitOptions options) {
  return splitter(true, options);
}
SplitStage split_by_worker(SplitOptions options) {
  return splitter(false, options);
}

SplitStage single_node_only() {
  SplitStage stage = split_with([](std::vector<std::string> urls, const PassContext& ctx) {
    if (ctx.world_size > 1) {
      throw Error::invalid_argument(
          "this pipeline reads every shard on every rank, but the job has " +
          std::to_string(ctx.world_size) + " ranks: add split_by_node (or another node splitter)");
    }
    return urls;
  });
  stage.name = "single_node_only";
  return stage;
}

SplitStage split_with(Splitter splitter) {
  if (!splitter) throw Error::invalid_argument("split_with: empty splitter");
  return {"split_with", std::move(splitter), {}};
}

StreamPtr<Sample> TarSamplesStage::operator()(StreamPtr<std::string> up) const {
  // Refused when the pipeline is built, not at its first pass.
  if (options.interleave == 0) {
    throw Error::invalid_argument("tar_samples: interleave must be at least 1 shard at once");
  }
  return std::make_unique<TarSamplesStream>(std::move(up), options);
}

TarSamplesStage tar_samples(TarSamplesOptions options) {
  return {std::move(options)};
}

}  // namespace wds
