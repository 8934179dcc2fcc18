// Reading shards joined by key (wds/join.hpp): what TarSamples and the state of buffered
// samples call, beside lib/tar/samples.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/tar/samples.hpp"
#include "wds/join.hpp"
#include "wds/state.hpp"

namespace wds {

// How join_partners gets partner `column`'s source: opened now, or one opened ahead of its turn
// (TarSamplesOptions::read_ahead), or the Error that opening it ahead raised.
using OpenPartner =
    std::function<std::unique_ptr<ByteSource>(std::size_t column, const std::string& url)>;

// Joins the partners of `shard` (a shard of join's first list, read from its start) to it, their
// sources from `open_partner`, in the join's order. Throws the Error of the first partner that
// fails to open.
void join_partners(ShardSamples& shard, const ShardJoin& join, TarReaderOptions tar,
                   MetricsCounters* metrics, const OpenPartner& open_partner);

// reopen_at for a shard of join's first list and its partners: each is reopened at the sample
// `key`, the first list's at `offset`, partner c at column_offsets[c] (an empty key: all from
// their start). The sample returned holds the fields of all.
ReopenedShard reopen_joined(const ShardJoin& join, const std::string& url, std::uint64_t offset,
                            const std::string& key,
                            const std::vector<std::uint64_t>& column_offsets,
                            const OpenOptions& open, TarReaderOptions tar,
                            MetricsCounters* metrics);

// Where a joined sample starts in each column (Sample::columns(), TarSamples::Position), in a
// state: their count, then each.
void save_column_offsets(StateWriter& out, const std::vector<std::uint64_t>& offsets);
// Reads them back for a pipeline joined with `join`: the count must be its number of columns.
std::vector<std::uint64_t> load_column_offsets(StateReader& in, const ShardJoin& join);

// The joined sets, as the tar_samples stage's configuration values.
void describe_join(Configuration& c, const ShardJoin& join);

}  // namespace wds
