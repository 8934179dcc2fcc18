// The benchmarks' own flag, --dir=DIR (where their data goes), taken out of the command line
// before Google Benchmark parses the rest.
#pragma once

#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

// Sets `dir` from --dir=DIR if given, then initialises Google Benchmark with the other
// arguments, after `extra` (flags that arguments given later may override).
inline void init_benchmark(int argc, char** argv, std::string& dir, std::vector<char*> extra = {}) {
  std::vector<char*> args{argv[0]};
  args.insert(args.end(), extra.begin(), extra.end());
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dir=", 6) == 0) {
      dir = argv[i] + 6;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
}
