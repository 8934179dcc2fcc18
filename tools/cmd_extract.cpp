// wds extract URL KEY: the fields of one sample as files KEY.EXT.
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tools/dataset_tools.hpp"
#include "wds/error.hpp"
#include "wds/sink.hpp"
#include "wds/tar_samples.hpp"

namespace wds::tool {
namespace {

namespace fs = std::filesystem;

struct ExtractOptions {
  std::string url;
  std::string key;
  std::string dir = ".";
};

// Keys come from the command line but name files: nothing may land outside DIR.
void check_key(const std::string& key) {
  auto refuse = [&](const std::string& why) {
    throw Error::invalid_argument("refusing key '" + key + "': " + why);
  };
  if (key.empty()) refuse("empty key");
  if (key.front() == '/') refuse("an absolute path would write outside the output directory");
  for (std::string_view rest = key;;) {
    std::size_t slash = rest.find('/');
    if (rest.substr(0, slash) == "..") {
      refuse("a '..' component would write outside the output directory");
    }
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
}

void run_extract(const ExtractOptions& o) {
  check_key(o.key);
  TarSamples samples(resolve_urls(o.url));
  while (std::optional<Sample> s = samples.next()) {
    if (s->key() != o.key) continue;
    for (const Field& f : s->fields()) {
      const fs::path path = fs::path(o.dir) / (o.key + "." + f.ext);
      std::error_code ec;
      fs::create_directories(path.parent_path(), ec);
      if (ec) {
        throw Error::unavailable(path.parent_path().string(), "",
                                 "cannot create directory: " + ec.message());
      }
      // The sink writes a temporary file and renames it: no half-written file on failure.
      std::unique_ptr<ByteSink> sink = open_sink(path.string());
      sink->write(f.data.span());
      sink->close();
      std::printf("%s\n", path.string().c_str());
    }
    std::fflush(stdout);
    return;  // the first sample with the key; the rest of the shards are not read
  }
  throw Error::not_found(o.url, "", "no sample with key '" + o.key + "'");
}

}  // namespace

void add_extract(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "extract",
      "Write the fields of the first sample with key KEY to files DIR/KEY.EXT and print their "
      "names.");
  auto o = std::make_shared<ExtractOptions>();
  cmd->add_option("URL", o->url, "shard URL (or a pattern: its shards are searched in order)")
      ->required();
  cmd->add_option("KEY", o->key,
                  "the sample's key, exactly as 'wds ls' prints it; a '/' in it makes "
                  "subdirectories, '..' components and absolute keys are refused")
      ->required();
  cmd->add_option("-o,--output-dir", o->dir, "directory to write into (created if missing)")
      ->capture_default_str();
  cmd->footer(
      "A key that no sample has is a 'not found' error (exit code 1).\n\n"
      "Examples:\n"
      "  wds extract train-000000.tar n01440764/img_0042          # ./n01440764/img_0042.jpg, ...\n"
      "  wds extract 'train-{000000..000099}.tar' 00000042 -o /tmp/sample");
  cmd->callback([o] { run_extract(*o); });
}

}  // namespace wds::tool
