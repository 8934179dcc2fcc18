// Resume at every cut: a pipeline interrupted after any number of samples, saved and restored
// into a fresh one, must yield what the uninterrupted run yields, sample for sample.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "wds/loader.hpp"
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

// A Loader's items per epoch, described: uninterrupted (cut 0), or saved after `cut` items and
// restored into a fresh loader over a fresh pipeline, which plays the rest of the epochs.
template <class T>
std::vector<std::vector<std::string>> loader_epochs(
    const std::function<Pipeline<T>()>& make, const LoaderOptions<T>& options, int epochs,
    std::size_t cut, const std::function<std::string(const T&)>& describe) {
  std::vector<std::vector<std::string>> out;
  std::string state;
  std::size_t n = 0;
  int epoch = 0;
  {
    Loader<T> loader(make(), options);
    for (; epoch < epochs; ++epoch) {
      out.emplace_back();
      bool stop = false;
      for (T& item : loader) {
        out.back().push_back(describe(item));
        if (++n == cut) {
          stop = true;
          break;
        }
      }
      if (stop) break;
    }
    if (cut == 0) return out;
    state = loader.state();
  }
  Loader<T> loader(make(), options);
  loader.restore(state);
  for (; epoch < epochs; ++epoch) {
    if (out.size() <= static_cast<std::size_t>(epoch)) out.emplace_back();
    for (T& item : loader) out[static_cast<std::size_t>(epoch)].push_back(describe(item));
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
