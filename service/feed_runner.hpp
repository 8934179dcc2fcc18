// service/feed_runner.hpp: what a trainer's feed runs, a Loader over the rank's pipeline.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "service/protocol.hpp"
#include "service/wire.hpp"
#include "wds/loader.hpp"
#include "wds/service.hpp"

namespace wds::detail {

// What a feed's thread runs: a Loader<T> over the rank's pipeline, its items as records. Each
// launch of a feed has its own: a launch abandoned while its thread waits on the source keeps
// it (and destroys it on that thread when the source answers).
class FeedRunner {
 public:
  virtual ~FeedRunner() = default;
  // Builds the loader for this start (restoring or at the epoch) and begins its pass; its
  // batches are allocated from `memory` (null: the heap).
  virtual void start(const protocol::Start& start, std::shared_ptr<BlockAllocator> memory) = 0;
  // The next batch and the feed's position after it; nullopt at the end of the pass.
  virtual std::optional<std::pair<wire::Record, std::string>> next() = 0;
  virtual Metrics metrics() const = 0;
};

template <class T>
class LoaderRunner final : public FeedRunner {
 public:
  LoaderRunner(typename Server<T>::MakePipeline make, StreamInfo info,
               std::shared_ptr<const ServerOptions> o)
      : make_(std::move(make)), info_(info), options_(std::move(o)) {}

  void start(const protocol::Start& start, std::shared_ptr<BlockAllocator> memory) override {
    LoaderOptions<T> lo;
    lo.memory = std::move(memory);
    lo.workers = options_->workers;
    lo.prefetch = options_->prefetch;
    lo.ordered = true;  // the same batches in the same order on every run
    lo.resumable = true;
    lo.group = info_.producer;
    lo.groups = info_.producers;
    // Pass after pass: the trainer counts its epochs over all producers, as a Loader counts
    // over its workers.
    if (start.continuous) lo.epoch_length = std::numeric_limits<std::uint64_t>::max();
    auto loader = std::make_unique<Loader<T>>(make_(info_), lo);
    if (start.state) {
      loader->restore(*start.state);
    } else {
      loader->set_epoch(start.epoch);
    }
    loader->begin_pass();
    std::lock_guard lock(mutex_);
    loader_ = std::move(loader);
  }

  std::optional<std::pair<wire::Record, std::string>> next() override {
    std::optional<T> item = loader_->next();
    if (!item) return std::nullopt;
    std::string state = loader_->state();
    if constexpr (std::is_same_v<T, Tuple>) {
      return std::pair{wire::to_record(std::move(*item), options_->names), std::move(state)};
    } else {
      return std::pair{wire::to_record(std::move(*item)), std::move(state)};
    }
  }

  Metrics metrics() const override {
    std::lock_guard lock(mutex_);
    return loader_ ? loader_->metrics() : Metrics{};
  }

 private:
  typename Server<T>::MakePipeline make_;
  StreamInfo info_;
  std::shared_ptr<const ServerOptions> options_;
  mutable std::mutex mutex_;  // loader_ is set on the feed's thread, read by metrics()
  std::unique_ptr<Loader<T>> loader_;
};

// Makes the runner of a rank's launch (Server<T> makes LoaderRunner<T>s).
using RunnerFactory = std::function<std::unique_ptr<FeedRunner>(const StreamInfo&)>;

}  // namespace wds::detail
