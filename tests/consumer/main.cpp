// A user's program: writes a shard (one field encoded from a tensor as a PNG, so the image
// codec and its OpenCV dependency are linked), reads it back through decode, to_tuple, batched
// and a Loader, and exits 0 only if everything round-trips.
#include <wds/wds.hpp>

#include <cstdio>

int main() {
  std::string tar;
  wds::Tensor pixels(wds::DType::uint8, {2, 2, 3});
  for (std::uint8_t i = 0; auto& v : pixels.values<std::uint8_t>()) v = i++;
  {
    wds::TarWriter writer(wds::open_memory_sink("mem.tar", tar));
    for (const char* key : {"a", "b", "c"}) {
      wds::DecodedSample s(key);
      s.set("txt", key);
      s.set("png", pixels);
      writer.write(s);
    }
    writer.close();
  }
  wds::ShardSamples samples(wds::open_memory("mem.tar", wds::Bytes::copy_of(tar)));
  std::string keys;
  while (auto s = samples.next()) keys += s->key() + std::string(s->at("txt").str());

  // The same shard through the decoding pipeline, on a worker thread.
  auto source = wds::Pipeline<wds::Sample>([tar] {
    struct One final : wds::Stream<wds::Sample> {
      explicit One(std::string t) : tar(std::move(t)) {}
      void start(const wds::PassContext&) override {
        shard = std::make_unique<wds::ShardSamples>(
            wds::open_memory("mem.tar", wds::Bytes::copy_of(tar)));
      }
      std::optional<wds::Sample> next() override { return shard->next(); }
      std::string tar;
      std::unique_ptr<wds::ShardSamples> shard;
    };
    return wds::StreamPtr<wds::Sample>(std::make_unique<One>(tar));
  });
  wds::Loader<wds::Tuple> loader(
      source | wds::decode("rgb8") | wds::to_tuple("png", "txt") | wds::batched(3), {});
  bool images_ok = false;
  for (wds::Tuple& batch : loader) {
    const wds::Tensor& images = batch[0].get<wds::Tensor>();
    images_ok = images.shape() == wds::Tensor::Shape{3, 2, 2, 3} && images[2] == pixels;
  }
  std::printf("%s %s\n", keys.c_str(), images_ok ? "images ok" : "images wrong");
  return keys == "aabbcc" && images_ok && wds::expand_urls("x{0..1}").size() == 2 ? 0 : 1;
}
