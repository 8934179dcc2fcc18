// wds reshard INPUT-PATTERN... -o OUTPUT-PATTERN: stream samples into a new set of shards.
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/cli_checks.hpp"
#include "tools/dataset_tools.hpp"
#include "tools/progress.hpp"
#include "wds/error.hpp"
#include "wds/pipeline.hpp"
#include "wds/shardlists.hpp"
#include "wds/tar_writer.hpp"

namespace wds::tool {
namespace {

namespace fs = std::filesystem;

struct ReshardOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::optional<std::uint64_t> shards;
  std::optional<std::uint64_t> maxcount;
  std::optional<std::uint64_t> maxsize;
  std::size_t shuffle = 0;
  std::optional<std::uint64_t> seed;
};

// OUTPUT-PATTERN split around its one integer conversion, with ShardWriter's rules ("%d",
// "%06d"), so that --shards can name its N shards up front.
struct NamePattern {
  std::string prefix, spec, suffix;

  explicit NamePattern(const std::string& pattern) {
    ShardWriter check(pattern);  // refuses what ShardWriter refuses, with its message
    std::size_t pct = pattern.find('%');
    std::size_t d = pattern.find('d', pct);
    prefix = pattern.substr(0, pct);
    spec = pattern.substr(pct, d - pct) + "llu";
    suffix = pattern.substr(d + 1);
  }
  std::string name(std::uint64_t index) const {
    char number[64];
    std::snprintf(number, sizeof number, spec.c_str(), static_cast<unsigned long long>(index));
    return prefix + number + suffix;
  }
  // True if `path` is one of the names (some index gives exactly it).
  bool matches(const std::string& path) const {
    if (path.size() <= prefix.size() + suffix.size() || !path.starts_with(prefix) ||
        !path.ends_with(suffix)) {
      return false;
    }
    std::string digits = path.substr(prefix.size(), path.size() - prefix.size() - suffix.size());
    if (digits.size() > 19 || digits.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    return name(std::stoull(digits)) == path;
  }
};

// A local path as an absolute, normalized one, so that "./a/x.tar" and "a/x.tar" compare equal.
std::string absolute_path(const std::string& url) {
  std::string path = url.starts_with("file://") ? url.substr(7) : url;
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path), ec);
  return ec ? fs::absolute(path).lexically_normal().string() : p.string();
}

// Output shards are renamed into place while inputs are still being read: an input that an
// output would replace could be read after it was overwritten. Refuse that up front.
void refuse_overwriting_inputs(const std::vector<std::string>& urls, const std::string& output) {
  const std::string directory = fs::path(output).parent_path().string();
  if (directory.find('%') != std::string::npos) return;  // numbered directories: not checked
  const NamePattern absolute(
      (fs::path(absolute_path(directory.empty() ? "." : directory)) / fs::path(output).filename())
          .string());
  for (const std::string& url : urls) {
    const std::string scheme = url_scheme(url);
    if (url == "-" || !(scheme.empty() || scheme == "file")) continue;
    if (absolute.matches(absolute_path(url))) {
      throw Error::invalid_argument(url, "",
                                    "input shard would be overwritten by an output shard of '" +
                                        output + "': write the new shards elsewhere");
    }
  }
}

void run_reshard(const ReshardOptions& o) {
  if (!o.shards && !o.maxcount && !o.maxsize) {
    throw CLI::RequiredError("--shards, --maxcount or --maxsize");
  }
  const NamePattern names(o.output);
  std::vector<std::string> urls = resolve_patterns(o.inputs);
  refuse_overwriting_inputs(urls, o.output);
  make_output_directory(o.output);

  // Rank 0 of 1 whatever the launcher's environment says: resharding reads every shard.
  ShardListOptions list;
  list.seed = o.seed;
  list.distributed.rank = 0;
  list.distributed.world_size = 1;
  Pipeline<Sample> samples = ShardList(std::move(urls), list) | tar_samples();
  // The buffer fills completely before the first sample leaves: the best mix it can give.
  if (o.shuffle > 0) samples = samples.shuffle(o.shuffle, o.shuffle);

  TarWriterOptions tar;
  tar.mtime = 0;  // the same inputs give the same bytes
  std::vector<ShardCount> counts;
  Progress progress("reshard");
  if (o.shards) {
    // Sample i goes to shard i % N: shard k then holds samples k, k + N, ..., so a trainer
    // that takes the shards whose number % trainers == its id gets every trainers-th sample.
    const std::uint64_t n = *o.shards;
    std::vector<std::unique_ptr<TarWriter>> writers;
    for (std::uint64_t k = 0; k < n; ++k) {
      counts.push_back({names.name(k)});
      writers.push_back(std::make_unique<TarWriter>(open_sink(counts.back().path), tar));
    }
    std::uint64_t i = 0;
    for (Sample& s : samples) {
      const std::uint64_t k = i++ % n;
      writers[k]->write(s);
      counts[k].samples += 1;
      counts[k].bytes += s.payload_bytes();
      progress.add(1, s.payload_bytes());
    }
    for (auto& w : writers) w->close();
    progress.done();
    if (i < n) {
      std::fprintf(stderr, "wds: warning: %llu samples for %llu shards: %llu shards are empty\n",
                   static_cast<unsigned long long>(i), static_cast<unsigned long long>(n),
                   static_cast<unsigned long long>(n - i));
    }
  } else {
    ShardWriterOptions wo;
    if (o.maxcount) wo.max_count = *o.maxcount;
    if (o.maxsize) wo.max_size = *o.maxsize;
    wo.tar = tar;
    ShardWriter writer(o.output, wo);
    for (Sample& s : samples) write_counted(writer, s, counts, progress);
    writer.close();
    progress.done();
  }
  print_shard_counts(counts);
}

}  // namespace

void add_reshard(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "reshard",
      "Stream the samples of shards into a new set of shards: N of them, or of a given size.");
  auto o = std::make_shared<ReshardOptions>();
  cmd->add_option("INPUT-PATTERN", o->inputs, "shard URL patterns, read in order")->required();
  cmd->add_option("-o,--output", o->output,
                  "new shard file names with one integer conversion, e.g. out/train-%06d.tar")
      ->required()
      ->type_name("PATTERN");
  auto* shards = cmd->add_option(
      "--shards", o->shards,
      "exactly N shards, numbered 0..N-1, written at once in one pass: sample i (in reading "
      "order, after --shuffle) goes to shard i % N, so shard k holds samples k, k+N, k+2N, ...");
  shards->check(at_least<std::uint64_t>(1));
  auto* maxcount =
      cmd->add_option("--maxcount", o->maxcount,
                      "consecutive shards of at most N samples (default with --maxsize: " +
                          std::to_string(ShardWriterOptions{}.max_count) + ")");
  maxcount->check(at_least<std::uint64_t>(1));
  auto* maxsize = cmd->add_option(
      "--maxsize", o->maxsize,
      "consecutive shards of at most BYTES of payload (suffixes k, M, G... in powers of 1000; "
      "default with --maxcount: 3G)");
  maxsize->transform(CLI::AsSizeValue(true));
  maxsize->transform(at_least<std::uint64_t>(1));  // a transform runs first: on the text as typed
  shards->excludes(maxcount)->excludes(maxsize);
  cmd->add_option("--shuffle", o->shuffle,
                  "mix samples through a shuffle buffer of N (filled before the first sample "
                  "is written); samples still never repeat or go missing")
      ->check(at_least<std::size_t>(0));
  cmd->add_option("--seed", o->seed, "seed of --shuffle (default: WDS_SEED, else 0)")
      ->check(at_least<std::uint64_t>(0));
  cmd->footer(
      "Members get modification time 0, so the same inputs give byte-identical shards. Prints "
      "each shard\nwritten with its samples and payload bytes, then the totals.\n\n"
      "Examples:\n"
      "  wds reshard 'in/train-{000000..000099}.tar' -o 'out/train-%06d.tar' --shards 8\n"
      "      # trainer t of 4 reads the shards k with k % 4 == t\n"
      "  wds reshard 'in/*.tar' -o 'out/train-%06d.tar' --maxsize 1G --shuffle 10000 --seed 7");
  cmd->callback([o] { run_reshard(*o); });
}

}  // namespace wds::tool
