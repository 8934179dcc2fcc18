// The wds tool's subcommands. Each adds itself to the CLI11 app and runs when chosen.
#pragma once

#include <CLI/CLI.hpp>

namespace wds::tool {

void add_expand(CLI::App& app);
void add_ls(CLI::App& app);
void add_merge_states(CLI::App& app);
void add_bench(CLI::App& app);
void add_index(CLI::App& app);
#if WDS_TOOL_SERVICE
void add_serve(CLI::App& app);
#endif

}  // namespace wds::tool
