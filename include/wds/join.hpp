// wds/join.hpp: ShardJoin, shard sets joined by key (column stores).
//
//   // images in one shard set, captions and embeddings in two others, same keys in the same order
//   auto ds = wds::WebDataset("imgs-{000..009}.tar",
//                             {.join = {"caps-{000..009}.tar", "emb-{000..009}.tar"}});
//   for (wds::Sample& s : ds) use(s.at("jpg"), s.at("txt"), s.at("npy"));
//
// The first shard set (the one given to WebDataset or read by tar_samples) leads: its shard list
// is the one split by rank and worker, shuffled, resampled or dealt to canonical streams, and
// shard i of it is read together with shard i of every joined set (by position in the expanded
// lists, which must be of the same length). The shards of one group are read in lockstep: the
// j-th sample of each holds the same key, and the sample handed on holds the fields of all, the
// first set's first, then each joined set's in the order given. Its url(), offset() and
// local_path() are the first set's; Sample::columns() says where the other parts are.
//
// Errors, each a corrupt_data Error through the handler, naming both shards and both keys:
// - a key that differs at the same position (missing, extra or out of order), or a shard that
//   ends before its partner: if the handler continues, the rest of that group is skipped, as
//   the rest of a damaged shard is;
// - a field (extension) present in two sets for one key: if the handler continues, the later
//   set's field is dropped and the first kept (as for a duplicate member in one shard).
// A read error in any shard of the group ends the group the same way.
//
// Resume (wds/state.hpp) records every set's position, and a joined pipeline refuses a state
// saved without the join or with other joined sets (an invalid_argument Error naming what
// differs).
//
// Thread safety: immutable once built; shared by the pipeline's passes and workers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace wds {

class ShardJoin {
 public:
  // `first`: the leading shard list; `columns`: each joined set's list, in the same order (shard
  // i of each pairs with first[i]). Throws an invalid_argument Error when a list's length
  // differs from first's (naming both counts), when there is no joined set, or when a URL
  // appears twice in `first` with different partners.
  ShardJoin(const std::vector<std::string>& first, std::vector<std::vector<std::string>> columns);

  // The partners of a shard of the first list, one per joined set; throws an invalid_argument
  // Error naming the URL if it is not in the first list.
  std::vector<std::string> partners(const std::string& url) const;
  std::size_t columns() const noexcept { return columns_.size(); }
  // Joined set c's list (c < columns()), as given.
  const std::vector<std::string>& column(std::size_t c) const { return columns_.at(c); }

 private:
  std::vector<std::vector<std::string>> columns_;
  std::unordered_map<std::string, std::size_t> index_;  // first-list URL -> its position
};

}  // namespace wds
