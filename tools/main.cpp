// wds: a thin command-line layer over the library's public API.
#include <cstdio>
#include <exception>

#include "tools/commands.hpp"
#include "tools/dataset_tools.hpp"
#include "wds/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"wds: stream, inspect and split WebDataset tar shards."};
  app.name("wds");
  app.require_subcommand(1);
  app.footer(
      "URL patterns use WebDataset's notation: shard-{000000..000099}.tar, {a,b}, several sets "
      "joined by '::',\n${NAME} for the environment variable WDS_NAME. A URL is a local path, "
      "file://..., http(s)://..., s3://bucket/key,\ngs://bucket/object, az://container/blob, "
      "hf://datasets/ORG/NAME[@REV]/path, pipe:COMMAND\n(allowed by WDS_ALLOW_PIPE=1) or - "
      "(stdin). A URL ending in / or holding * is listed (local\ndirectories and globs, object "
      "store prefixes, the Hub's tree).\n\nRun 'wds COMMAND --help' for a command's options.");
  wds::tool::add_expand(app);
  wds::tool::add_ls(app);
  wds::tool::add_merge_states(app);
  wds::tool::add_bench(app);
  wds::tool::add_index(app);
  wds::tool::add_create(app);
  wds::tool::add_reshard(app);
  wds::tool::add_cat(app);
  wds::tool::add_extract(app);
  wds::tool::add_stats(app);
#if WDS_TOOL_SERVICE
  wds::tool::add_serve(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help prints to stdout and exits 0; a usage error prints to stderr and exits 1.
    int code = app.exit(e);
    return code == 0 ? 0 : 1;
  } catch (const wds::Error& e) {
    std::fprintf(stderr, "wds: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "wds: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
