// A user's program: writes a shard, reads it back, and exits 0 only if the samples round-trip.
#include <wds/wds.hpp>

#include <cstdio>

int main() {
  std::string tar;
  {
    wds::TarWriter writer(wds::open_memory_sink("mem.tar", tar));
    for (const char* key : {"a", "b", "c"}) {
      wds::Sample s(key, nullptr);
      s.add("txt", wds::Bytes::copy_of(std::string_view(key)));
      writer.write(s);
    }
    writer.close();
  }
  wds::ShardSamples samples(wds::open_memory("mem.tar", wds::Bytes::copy_of(tar)));
  std::string keys;
  while (auto s = samples.next()) keys += s->key() + std::string(s->at("txt").str());
  std::printf("%s\n", keys.c_str());
  return keys == "aabbcc" && wds::expand_urls("x{0..1}").size() == 2 ? 0 : 1;
}
