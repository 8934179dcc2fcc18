// Resume at every cut: a pipeline interrupted after any number of samples, saved and restored
// into a fresh one, must yield what the uninterrupted run yields, sample for sample.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "wds/pipeline.hpp"
#include "wds/sample.hpp"

namespace wds::test {

using MakePipeline = std::function<Pipeline<Sample>()>;
// What is compared of each sample ("key/cls", or all its fields).
using DescribeSample = std::function<std::string(const Sample&)>;

// The samples of `passes` passes of `p`, described.
inline std::vector<std::string> run_passes(Pipeline<Sample>& p, int passes,
                                           const DescribeSample& describe) {
  std::vector<std::string> out;
  for (int k = 0; k < passes; ++k) {
    for (Sample& s : p) out.push_back(describe(s));
  }
  return out;
}

// Interrupts after `cut` samples (counted over all passes), saves, restores into a fresh
// pipeline, and returns the samples of the whole run.
inline std::vector<std::string> interrupted_run(const MakePipeline& make, int passes,
                                                std::size_t cut, const DescribeSample& describe) {
  std::vector<std::string> out;
  std::string state;
  int pass = 0;
  {
    Pipeline<Sample> p = make();
    bool stopped = false;
    for (; pass < passes && !stopped; ++pass) {
      for (Sample& s : p) {
        out.push_back(describe(s));
        if (out.size() == cut) {
          stopped = true;
          break;
        }
      }
    }
    if (stopped) --pass;  // that pass is unfinished
    state = p.state();
  }
  Pipeline<Sample> q = make();
  q.restore(state);
  for (; pass < passes; ++pass) {
    for (Sample& s : q) out.push_back(describe(s));
  }
  return out;
}

inline void check_every_cut(const MakePipeline& make, int passes, const DescribeSample& describe) {
  Pipeline<Sample> p = make();
  const std::vector<std::string> reference = run_passes(p, passes, describe);
  ASSERT_GT(reference.size(), 10u);
  for (std::size_t cut = 1; cut <= reference.size(); ++cut) {
    ASSERT_EQ(interrupted_run(make, passes, cut, describe), reference)
        << "interrupted after " << cut;
  }
}

}  // namespace wds::test
