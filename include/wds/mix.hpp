// wds/mix.hpp: mixing datasets: mix() draws each item from a source chosen at random with given
// weights (webdataset's RandomMix, tf.data's sample_from_datasets, MosaicML's stream
// proportions); interleave() takes one from each source in turn (webdataset's RoundRobin).
//
//   wds::Pipeline<wds::Sample> web = wds::WebDataset(web_urls, {.seed = 7});
//   wds::Pipeline<wds::Sample> books = wds::WebDataset(book_urls, {.seed = 7});
//   wds::Pipeline<wds::Sample> code = wds::WebDataset(code_urls, {.seed = 7});
//   auto ds = wds::mix({web, books, code}, {0.6, 0.3, 0.1},
//                      {.exhausted = wds::Exhausted::restart})
//                 .with_epoch(100000);   // restart makes the mix endless: bound each pass
//   for (wds::Sample& s : ds) train(s);
//
// The choice of source is seeded from (seed, epoch, rank, worker) as the shuffles are, so a
// run repeats itself and every rank and loader worker draws its own sequence. The seed is
// MixOptions::seed, else the first source's; the rank and world size are those of the sources
// (they must agree where they are set). Each source runs as it would alone: it keeps its own
// seed, rank and world size, and takes the pass's epoch and worker from the mix, so under a
// Loader each worker's mix reads the part of every source that worker would read of it alone.
// A source's with_epoch is refused and its set_epoch has no effect: bound and set the epoch of
// the mix itself.
//
// When a source runs out (MixOptions::exhausted): stop ends the pass there (the proportions hold
// to the end, the other sources' rest is not read this pass); drop goes on with the others,
// their weights renormalised, until all have ended; restart begins that source's next epoch, so
// the mix never ends (bound it with with_epoch). A source that yields nothing right after a
// restart is dropped, so empty data never spins.
//
// Resume: the mix stage saves its random state, the turn, which sources ended or restarted, and
// every running source's state; Pipeline::state()/restore() and a resumable Loader continue
// a mix exactly where it was.
//
// Errors: invalid_argument Error for no sources, a weight count other than the source count, a
// negative, NaN or infinite weight, all weights zero, a source with with_epoch, or sources set
// for different ranks or world sizes.
// Thread safety: as Pipeline (the result is one).
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "wds/error.hpp"
#include "wds/pipeline.hpp"
#include "wds/random.hpp"
#include "wds/state.hpp"

namespace wds {

// What a mix does when one of its sources runs out of items in a pass.
enum class Exhausted {
  stop,     // end the pass: the proportions stay exact
  drop,     // continue with the other sources, weights renormalised
  restart,  // start that source's next epoch: the mix never ends
};

struct MixOptions {
  // drop by default: a pass then reads every item of every source once, as each source alone
  // would, and nothing is lost without asking; stop and restart trade that for exact
  // proportions.
  Exhausted exhausted = Exhausted::drop;
  // Seeds the choice of source; default: the first source's seed.
  std::optional<std::uint64_t> seed;
};

namespace detail {

// The seed purpose of a mix's choices: apart from wds::seed_purpose's small numbers ("mix" in
// ASCII), so that it never draws the sequence of another stage.
inline constexpr std::uint64_t kMixSeedPurpose = 0x6d6978;

// Draws items from several sources: by weight, or in turn when `weights` is empty.
template <class T>
class MixStream final : public Stream<T> {
 public:
  struct Source {
    StreamPtr<T> stream;
    PassContext context;  // the source's own seed, rank and world size
  };

  MixStream(std::vector<Source> sources, std::vector<double> weights, Exhausted exhausted)
      : sources_(std::move(sources)),
        weights_(std::move(weights)),
        exhausted_(exhausted),
        ended_(sources_.size()),
        restarts_(sources_.size()) {}

  void start(const PassContext& ctx) override {
    ctx_ = ctx;
    // The weights take part in the seed, so that a mix nested in another one with other
    // weights does not make the same choices.
    std::uint64_t digest = sources_.size();
    for (double w : weights_) digest = mix64(digest ^ std::bit_cast<std::uint64_t>(w));
    rng_ =
        Rng(derive_seed(ctx.seed, {kMixSeedPurpose, ctx.epoch, static_cast<std::uint64_t>(ctx.rank),
                                   static_cast<std::uint64_t>(ctx.worker), digest}));
    turn_ = 0;
    stopped_ = false;
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      ended_[i] = false;
      restarts_[i] = 0;
      start_source(i);
    }
  }

  std::optional<T> next() override {
    while (!stopped_) {
      std::optional<std::size_t> i = weights_.empty() ? next_turn() : draw();
      if (!i) return std::nullopt;
      if (std::optional<T> item = pull(*i)) return item;
      if (exhausted_ == Exhausted::stop) stopped_ = true;
    }
    return std::nullopt;
  }

  // The mix's own fields first, then each source's: restore must restart a source at its
  // saved epoch before that source restores its position.
  void save(StateWriter& out) const override {
    save_item(out, rng_);
    out.put(static_cast<std::uint64_t>(turn_));
    out.put(stopped_);
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      out.put(static_cast<bool>(ended_[i]));
      out.put(restarts_[i]);
      // An ended source is never pulled again this pass: its position is not needed.
      if (!ended_[i]) sources_[i].stream->save(out);
    }
  }
  void restore(StateReader& in) override {
    load_item(in, rng_);
    turn_ = static_cast<std::size_t>(in.get_u64());
    stopped_ = in.get_bool();
    if (turn_ >= sources_.size()) {
      throw Error::invalid_argument("mix: the state's turn " + std::to_string(turn_) +
                                    " is not one of " + std::to_string(sources_.size()) +
                                    " sources: it was saved by another mix");
    }
    // Checked: the generator's increment (load_item), the turn names a source, restarts only
    // when exhausted sources restart. The generator's state word and the restart counts (any
    // number of passes over a source): only the checksum.
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      ended_[i] = in.get_bool();
      restarts_[i] = in.get_u64();
      if (restarts_[i] != 0 && exhausted_ != Exhausted::restart) {
        throw Error::invalid_argument(
            "mix: the state restarted source " + std::to_string(i) + " " +
            std::to_string(restarts_[i]) +
            " times, and this mix does not restart its sources: malformed state");
      }
      if (restarts_[i] != 0) start_source(i);
      in.forget_handed_out();  // each source's shards are its own
      if (!ended_[i]) sources_[i].stream->restore(in);
    }
    // An ended source's shard list is not restored, yet its samples may still be buffered
    // downstream: the state's shards cannot all be checked against the lists.
    for (bool ended : ended_) {
      if (ended) in.trust_any_shard();
    }
    // Shards downstream come from any of the sources, not only the last one restored.
    in.forget_handed_out();
  }

  void describe(Configuration& c, const PassContext& ctx) const override {
    c.stage("mix");
    std::string weights;
    for (double w : weights_) weights += (weights.empty() ? "" : ",") + std::to_string(w);
    c.add("weights", weights.empty() ? std::string("round-robin") : weights);
    c.add("exhausted", static_cast<std::uint64_t>(exhausted_));
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      PassContext sc = ctx;
      sc.seed = sources_[i].context.seed;
      sc.rank = sources_[i].context.rank;
      sc.world_size = sources_[i].context.world_size;
      c.stage("mix source " + std::to_string(i));
      c.add("seed", sc.seed);
      sources_[i].stream->describe(c, sc);
    }
  }

  // Hands each item on at once, in order, holding none; only the source drawn is pulled, so
  // every source may fill the row of the batch being filled.
  void offer_slots(BatchSlots* slots) override {
    for (Source& s : sources_) s.stream->offer_slots(slots);
  }

 private:
  void start_source(std::size_t i) {
    PassContext c = ctx_;
    c.seed = sources_[i].context.seed;
    c.rank = sources_[i].context.rank;
    c.world_size = sources_[i].context.world_size;
    c.epoch = ctx_.epoch + restarts_[i];
    sources_[i].stream->start(c);
  }

  // The next item of source i; nullopt (and i marked ended) when it has none.
  std::optional<T> pull(std::size_t i) {
    if (std::optional<T> item = sources_[i].stream->next()) return item;
    if (exhausted_ == Exhausted::restart) {
      ++restarts_[i];
      start_source(i);
      if (std::optional<T> item = sources_[i].stream->next()) return item;
    }
    ended_[i] = true;
    return std::nullopt;
  }

  // Round-robin: the next source in turn that has not ended.
  std::optional<std::size_t> next_turn() {
    for (std::size_t k = 0; k < sources_.size(); ++k) {
      std::size_t i = turn_;
      turn_ = (turn_ + 1) % sources_.size();
      if (!ended_[i]) return i;
    }
    return std::nullopt;
  }

  // A source drawn with probability proportional to its weight among those not ended: a
  // uniform double in [0, total) (53 bits of one draw) walked along the weights.
  std::optional<std::size_t> draw() {
    double total = 0;
    std::optional<std::size_t> last;
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      if (ended_[i] || weights_[i] <= 0) continue;
      total += weights_[i];
      last = i;
    }
    if (!last) return std::nullopt;
    double u = static_cast<double>(rng_.next_u64() >> 11) * 0x1.0p-53 * total;
    for (std::size_t i = 0; i < *last; ++i) {
      if (ended_[i] || weights_[i] <= 0) continue;
      if (u < weights_[i]) return i;
      u -= weights_[i];
    }
    return last;  // also where rounding leaves u at or past the last weight
  }

  std::vector<Source> sources_;
  std::vector<double> weights_;
  Exhausted exhausted_;
  PassContext ctx_;
  Rng rng_;
  std::size_t turn_ = 0;
  bool stopped_ = false;
  std::vector<char> ended_;
  std::vector<std::uint64_t> restarts_;  // per source: epochs begun after the pass's own
};

// The context of a mix of `sources`: the first source's, with `seed` if given, and the rank
// and world size of the sources that set one (more than one rank).
template <class T>
PassContext mix_context(const std::vector<Pipeline<T>>& sources, std::optional<std::uint64_t> seed,
                        const char* what) {
  if (sources.empty()) {
    throw Error::invalid_argument(std::string(what) + ": no sources");
  }
  PassContext ctx = sources.front().context();
  ctx.metrics = nullptr;
  std::optional<std::size_t> ranked;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const PassContext& c = sources[i].context();
    if (sources[i].epoch_length()) {
      throw Error::invalid_argument(
          std::string(what) + ": source " + std::to_string(i) +
          " has with_epoch, which a mix does not apply: set it on the mix instead");
    }
    if (c.world_size <= 1) continue;
    if (!ranked) {
      ranked = i;
      ctx.rank = c.rank;
      ctx.world_size = c.world_size;
    } else if (c.rank != ctx.rank || c.world_size != ctx.world_size) {
      throw Error::invalid_argument(
          std::string(what) + ": source " + std::to_string(i) + " is rank " +
          std::to_string(c.rank) + " of " + std::to_string(c.world_size) + " but source " +
          std::to_string(*ranked) + " is rank " + std::to_string(ctx.rank) + " of " +
          std::to_string(ctx.world_size));
    }
  }
  if (seed) ctx.seed = *seed;
  return ctx;
}

template <class T>
Pipeline<T> make_mix(std::vector<Pipeline<T>> sources, std::vector<double> weights,
                     const MixOptions& options, const char* what) {
  PassContext ctx = mix_context(sources, options.seed, what);
  std::vector<typename Pipeline<T>::Factory> factories;
  std::vector<PassContext> contexts;
  for (const Pipeline<T>& s : sources) {
    factories.push_back(s.factory());
    contexts.push_back(s.context());
  }
  return Pipeline<T>(
      [factories = std::move(factories), contexts = std::move(contexts),
       weights = std::move(weights), exhausted = options.exhausted] {
        std::vector<typename MixStream<T>::Source> streams;
        for (std::size_t i = 0; i < factories.size(); ++i) {
          streams.push_back({factories[i](), contexts[i]});
        }
        return std::make_unique<MixStream<T>>(std::move(streams), weights, exhausted);
      },
      ctx);
}

}  // namespace detail

// Each item from one of `sources`, chosen with probability weights[i] / (the sum of the weights
// of the sources still running). A weight of 0 leaves its source unread.
template <class T>
Pipeline<T> mix(std::vector<Pipeline<T>> sources, std::vector<double> weights,
                const MixOptions& options = {}) {
  if (sources.empty()) throw Error::invalid_argument("mix: no sources");
  if (weights.size() != sources.size()) {
    throw Error::invalid_argument("mix: " + std::to_string(weights.size()) + " weights for " +
                                  std::to_string(sources.size()) +
                                  " sources (one weight per source)");
  }
  double total = 0;
  for (std::size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0) {
      throw Error::invalid_argument("mix: weight " + std::to_string(i) + " is " +
                                    std::to_string(weights[i]) +
                                    "; weights must be finite and >= 0");
    }
    total += weights[i];
  }
  if (total <= 0) {
    throw Error::invalid_argument(
        "mix: all weights are zero; at least one source must have a weight above 0");
  }
  if (!std::isfinite(total)) {
    throw Error::invalid_argument("mix: the weights' sum is not finite; scale them down");
  }
  return detail::make_mix(std::move(sources), std::move(weights), options, "mix");
}
// mix({a, b, c}, {0.6, 0.3, 0.1}): a braced list deduces no vector's element type.
template <class T>
Pipeline<T> mix(std::initializer_list<Pipeline<T>> sources, std::vector<double> weights,
                const MixOptions& options = {}) {
  return mix(std::vector<Pipeline<T>>(sources), std::move(weights), options);
}

// One item from each of `sources` in turn (source 0, 1, ..., then 0 again), skipping those that
// ended (drop), ending at the first that ends (stop) or restarting it (restart).
template <class T>
Pipeline<T> interleave(std::vector<Pipeline<T>> sources, const MixOptions& options = {}) {
  return detail::make_mix(std::move(sources), {}, options, "interleave");
}
template <class T>
Pipeline<T> interleave(std::initializer_list<Pipeline<T>> sources, const MixOptions& options = {}) {
  return interleave(std::vector<Pipeline<T>>(sources), options);
}

}  // namespace wds
