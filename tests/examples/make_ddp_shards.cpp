// make_ddp_shards: the tiny dataset the ddp_train tests read.
//
//   make_ddp_shards OUTDIR NSHARDS SAMPLES_PER_SHARD [BROKEN]
//
// Writes OUTDIR/train-000000.tar ... with SAMPLES_PER_SHARD samples each, or with "A-B" shards of
// different sizes: shard s gets A + (5 * s) % (B - A + 1) samples. Keys are unique across
// shards ("s03_k007": shard 3, sample 7), so a sample seen twice or never is visible by key alone;
// each sample has a cls field (k % 10) and a txt field naming it. With BROKEN, shard number
// BROKEN is cut in half: whichever rank reads it fails, while the others do not.
#include <wds/wds.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::fprintf(stderr, "usage: make_ddp_shards OUTDIR NSHARDS SAMPLES_PER_SHARD [BROKEN]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int nshards = std::atoi(argv[2]);
  const std::string spec = argv[3];
  const std::size_t dash = spec.find('-');
  const int samples = std::atoi(spec.c_str());
  const int most = dash == std::string::npos ? samples : std::atoi(spec.c_str() + dash + 1);
  const int broken = argc == 5 ? std::atoi(argv[4]) : -1;
  if (nshards < 1 || nshards > 1000 || samples < 1 || samples > 1000 || most < samples ||
      most > 1000) {
    std::fprintf(stderr, "make_ddp_shards: NSHARDS and SAMPLES_PER_SHARD must be in [1, 1000]\n");
    return 2;
  }
  try {
    for (int s = 0; s < nshards; ++s) {
      char name[32];
      std::snprintf(name, sizeof name, "/train-%06d.tar", s);
      // A fixed mtime: the same arguments always give the same bytes.
      wds::TarWriter tar(wds::open_sink(dir + name), {.mtime = 0});
      const int n = samples + (5 * s) % (most - samples + 1);
      for (int k = 0; k < n; ++k) {
        char key[32];
        std::snprintf(key, sizeof key, "s%02d_k%03d", s, k);
        wds::Sample sample(key);
        sample.add("cls", wds::Bytes::copy_of(std::to_string(k % 10)));
        sample.add("txt", wds::Bytes::copy_of(std::string("sample ") + key));
        tar.write(sample);
      }
      tar.close();
      if (s == broken) {
        std::filesystem::path path = dir + name;
        std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
      }
    }
  } catch (const std::exception& e) {  // wds::Error, std::filesystem::filesystem_error
    std::fprintf(stderr, "make_ddp_shards: %s\n", e.what());
    return 1;
  }
  return 0;
}
