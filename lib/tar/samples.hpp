// What the tar units share about samples beyond wds/tar_samples.hpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "wds/tar_samples.hpp"

namespace wds {

// True for the extensions that name a sample's own metadata in WebDataset ("__key__",
// "__url__", "__local_path__"): a member "x.__key__" is refused as a duplicate.
bool is_reserved_field(std::string_view ext);

// Opens `url` at the sample that starts at byte `offset` with key `key` (as Sample::offset()
// and key() gave it) and returns the shard positioned after that sample, and the sample. It
// seeks where the source can; for a compressed shard or a source that cannot seek it reads the
// shard from the start and skips to the sample. A shard that no longer holds that sample there
// is a corrupt_data Error. An empty key means "the shard from its start" (no sample returned).
struct ReopenedShard {
  std::unique_ptr<ShardSamples> shard;
  std::optional<Sample> sample;
};
// The returned shard raises errors; set_handler() gives it another handler. With `metrics`, the
// shard counts as opened once (whether it was sought or read from the start), with every byte
// read, the skipped ones included.
ReopenedShard reopen_at(const std::string& url, std::uint64_t offset, const std::string& key,
                        const OpenOptions& open = {}, TarReaderOptions tar = {},
                        MetricsCounters* metrics = nullptr);

// open_url, counting (with `metrics`) the source's bytes, read time and retries under the URL's
// scheme. The shard itself is counted by the caller (count_shard), once it keeps it.
std::unique_ptr<ByteSource> open_counted(const std::string& url, const OpenOptions& options,
                                         MetricsCounters* metrics);
void count_shard(MetricsCounters* metrics, const std::string& url);

}  // namespace wds
