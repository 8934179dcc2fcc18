// wds cat INPUT-PATTERN...: the samples of several shards as one tar on stdout.
#include <unistd.h>

#include <string>
#include <vector>

#include "tools/dataset_tools.hpp"
#include "tools/progress.hpp"
#include "wds/error.hpp"
#include "wds/sink.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"

namespace wds::tool {
namespace {

void run_cat(const std::vector<std::string>& patterns) {
  // Like gzip: binary data on a terminal helps no one and can garble it.
  if (::isatty(STDOUT_FILENO) == 1) {
    throw Error::invalid_argument(
        "-", "",
        "refusing to write a tar archive to a terminal: redirect stdout (> all.tar) or "
        "pipe it");
  }
  TarSamples samples(resolve_patterns(patterns));
  TarWriterOptions tar;
  tar.mtime = 0;  // the same inputs give the same bytes
  TarWriter out(open_sink("-"), tar);
  Progress progress("cat");
  while (std::optional<Sample> s = samples.next()) {
    out.write(*s);
    progress.add(1, s->payload_bytes());
  }
  out.close();
  progress.done();
}

}  // namespace

void add_cat(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "cat",
      "Write the samples of shards, in order, as one tar archive on stdout (members "
      "'<key>.<ext>', fields sorted by extension).");
  auto patterns = std::make_shared<std::vector<std::string>>();
  cmd->add_option("INPUT-PATTERN", *patterns, "shard URL patterns, read in order")->required();
  cmd->footer(
      "Samples are regrouped as WebDataset reads them: names without a key/extension split "
      "and '__x__'\nmetadata members are left out; compressed inputs come out uncompressed.\n\n"
      "Examples:\n"
      "  wds cat 'train-{000000..000009}.tar' > first-ten.tar\n"
      "  wds cat 's3://bucket/train/' | tar tvf -");
  cmd->callback([patterns] { run_cat(*patterns); });
}

}  // namespace wds::tool
