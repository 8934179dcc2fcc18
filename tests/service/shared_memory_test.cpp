// Batches lent through shared memory to a trainer on the producer's host: the same batches as
// over the socket, blocks that come back and are reused, a trainer that keeps its batches (the
// producer never recycles what is lent, and copies beyond its limit), and the checks a trainer
// makes before it maps anything.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "service/protocol.hpp"
#include "service/shared_memory.hpp"
#include "tests/support/fixtures.hpp"
#include "tests/support/streams.hpp"
#include "wds/loader.hpp"
#include "wds/service.hpp"
#include "wds/transforms.hpp"

namespace wds {
namespace {

namespace shm = detail::shm;

constexpr int kItems = 96;
constexpr std::size_t kBatch = 8;
constexpr std::int64_t kSide = 64;  // a batch's images: 8 x 64 x 64 x 3 = 96 KiB, shared

// Item i: an image whose every byte depends on (i, position), and the label i.
Tuple item(int i) {
  Tensor image(DType::uint8, {kSide, kSide, 3});
  auto px = image.values<std::uint8_t>();
  for (std::size_t k = 0; k < px.size(); ++k) px[k] = static_cast<std::uint8_t>(i * 31 + k * 7);
  Tensor label(DType::int64, {});
  label.values<std::int64_t>()[0] = i;
  return {Value(image), Value(label)};
}

Pipeline<Tuple> batches() {
  std::vector<Tuple> items;
  for (int i = 0; i < kItems; ++i) items.push_back(item(i));
  return test::from_vector(std::move(items)) | batched(kBatch);
}

// Whether `batch` is batch number `n` of one pass, byte for byte.
::testing::AssertionResult is_batch(const Tuple& batch, int n) {
  for (std::size_t r = 0; r < kBatch; ++r) {
    const Tuple want = item(n * static_cast<int>(kBatch) + static_cast<int>(r));
    if (!(batch.at(0).get<Tensor>()[static_cast<std::int64_t>(r)] == want[0].get<Tensor>()) ||
        !(batch.at(1).get<Tensor>()[static_cast<std::int64_t>(r)] == want[1].get<Tensor>())) {
      return ::testing::AssertionFailure() << "row " << r << " of batch " << n << " differs";
    }
  }
  return ::testing::AssertionSuccess();
}

class Serving {
 public:
  explicit Serving(ServerOptions options)
      : server_([](const StreamInfo&) { return batches(); }, std::move(options)),
        thread_([this] { server_.run(); }) {}
  ~Serving() {
    server_.stop();
    thread_.join();
  }
  Server<Tuple>* operator->() { return &server_; }

 private:
  Server<Tuple> server_;
  std::thread thread_;
};

ServiceLoaderOptions trainer(const std::string& endpoint) {
  ServiceLoaderOptions o;
  o.servers = {endpoint};
  o.rank = 0;
  o.world_size = 1;
  o.timeout = std::chrono::milliseconds(20000);
  o.heartbeat = std::chrono::milliseconds(50);
  return o;
}

std::uint64_t source_bytes(const Metrics& m, std::string_view scheme) {
  for (const SourceMetrics& s : m.sources)
    if (s.scheme == scheme) return s.bytes;
  return 0;
}

class SharedMemory : public ::testing::Test {
 protected:
  std::string ipc(const std::string& name) const { return "ipc://" + dir_.file(name); }
  test::TempDir dir_;
};

// The images arrive through shared memory, the labels (small) over the socket, and the batches
// are those of an in-process pass; a trainer that declines shared memory gets copies of the same.
TEST_F(SharedMemory, LargeTensorsArriveLentAndEqualToTheSocketsCopies) {
  ServerOptions so;
  so.bind = ipc("s");
  Serving server(so);
  for (const bool shared : {true, false}) {
    SCOPED_TRACE(shared ? "shared memory" : "declined");
    const std::uint64_t lent_before =
        server->metrics().streams.empty() ? 0 : server->metrics().streams.at(0).shared_bytes;
    auto options = trainer(server->endpoint());
    options.shared_memory = shared;
    ServiceLoader<Tuple> loader(options);
    int n = 0;
    for (Tuple& batch : loader) EXPECT_TRUE(is_batch(batch, n++));
    EXPECT_EQ(n, kItems / static_cast<int>(kBatch));
    const std::uint64_t images = std::uint64_t{kItems} * kSide * kSide * 3;
    const std::uint64_t batch_bytes = kBatch * kSide * kSide * 3;
    const std::uint64_t lent = server->metrics().streams.at(0).shared_bytes - lent_before;
    EXPECT_EQ(source_bytes(loader.metrics(), "service-shm"), lent);
    if (shared) {
      // The batches the producer sent before the trainer's acceptance reached it (at most the
      // credits' worth) travel as copies; every later one is lent, whole.
      EXPECT_GE(lent, images - options.credits * batch_bytes);
      EXPECT_EQ(lent % batch_bytes, 0u);
    } else {
      EXPECT_EQ(lent, 0u);
    }
  }
}

// A trainer that drops each batch gives its block back, and so do restarts (set_epoch) for the
// batches that were in flight, unread: at the end the producer lends at most the credits' worth
// of blocks (sent, never taken), not one per batch. Writing into a lent batch harms no later one.
TEST_F(SharedMemory, BlocksComeBackWhenTheirTensorsDieOrTheirBatchIsDroppedUnread) {
  ServerOptions so;
  so.bind = ipc("s");
  Serving server(so);
  {
    ServiceLoader<Tuple> loader(trainer(server->endpoint()));
    loader.with_epoch(12);
    for (std::uint64_t epoch = 0; epoch < 5; ++epoch) {
      loader.set_epoch(epoch);  // each a restart of the producer's stream
      int n = 0;
      for (Tuple& batch : loader) {
        EXPECT_TRUE(is_batch(batch, n++));
        Tensor images = batch.at(0).get<Tensor>();
        std::memset(images.data(), 0xff, images.nbytes());  // the trainer may change its batch
      }
      EXPECT_EQ(n, 12);
    }
  }  // the trainer gives back what it still held, then leaves
  const std::uint64_t block = kBatch * kSide * kSide * 3;  // 96 KiB, a whole number of pages
  ServedStream s;
  for (int i = 0; i < 500; ++i) {  // the releases reach the producer soon after
    s = server->metrics().streams.at(0);
    if (s.lent_bytes <= ServiceLoaderOptions{}.credits * block) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::uint64_t credits = ServiceLoaderOptions{}.credits;
  // Of the 60 batches read, only those the producer sent before the trainer's acceptance of its
  // offer reached it may be copies: at most the first credits' worth (under load, 4 were).
  EXPECT_GE(s.shared_bytes, (60 - credits) * block);
  EXPECT_LE(s.lent_bytes, credits * block) << "blocks the producer still counts as lent";
}

// A trainer that keeps every batch: the producer never hands a lent block out again (the kept
// batches stay intact), and beyond shared_memory_bytes it sends copies instead of lending more.
TEST_F(SharedMemory, ATrainerKeepingItsBatchesGetsCopiesBeyondTheLimitAndNothingChanges) {
  ServerOptions so;
  so.bind = ipc("s");
  so.shared_memory_bytes = 4 * 100 * 1024;  // 4 image blocks (96 KiB, rounded to pages)
  Serving server(so);
  ServiceLoader<Tuple> loader(trainer(server->endpoint()));
  std::vector<Tuple> kept;
  for (Tuple& batch : loader) kept.push_back(batch);
  ASSERT_EQ(kept.size(), 12u);
  for (std::size_t n = 0; n < kept.size(); ++n) EXPECT_TRUE(is_batch(kept[n], static_cast<int>(n)));
  const ServedStream s = server->metrics().streams.at(0);
  EXPECT_EQ(s.shared_bytes, 4u * kBatch * kSide * kSide * 3) << "lent beyond the limit";
}

// What a trainer checks before it maps a producer's memory, and what it refuses in a table.
TEST(SharedMemoryChecks, OnlyTheProducersOwnOfferIsAcceptedAndTablesStayInsideTheirBlocks) {
  shm::Offer offer;
  ASSERT_TRUE(offer.valid());
  EXPECT_TRUE(shm::verify(offer.pid(), offer.fd(), offer.nonce()));
  shm::Nonce wrong = offer.nonce();
  wrong[0] ^= std::byte{1};
  EXPECT_FALSE(shm::verify(offer.pid(), offer.fd(), wrong));       // another process's file
  EXPECT_FALSE(shm::verify(offer.pid(), 1 << 20, offer.nonce()));  // no such descriptor
  EXPECT_FALSE(shm::verify(0, offer.fd(), offer.nonce()));         // no such process
  EXPECT_FALSE(shm::verify(offer.pid(), -1, offer.nonce()));

  auto refused = [](const protocol::SharedTable& t) {
    const std::string body = protocol::encode(t);
    try {
      protocol::decode_shared_table(std::as_bytes(std::span(body)), "tcp://producer");
      return std::string("(accepted)");
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::corrupt_data);
      EXPECT_EQ(e.url(), "tcp://producer");
      return e.cause();
    }
  };
  protocol::SharedTable t;
  t.frames.push_back({1, 7, 3, 4096, 4000, 200});
  EXPECT_NE(refused(t).find("outside the block of 4096 bytes"), std::string::npos);
  t.frames[0] = {0, 7, 3, 4096, 0, 100};
  EXPECT_NE(refused(t).find("description frame"), std::string::npos);
  t.frames[0] = {1, 7, 3, 4096, 0, 4096};
  t.retired = {1, 2};
  const std::string body = protocol::encode(t);
  const auto back = protocol::decode_shared_table(std::as_bytes(std::span(body)), "p");
  EXPECT_EQ(back.frames.at(0).length, 4096u);
  EXPECT_EQ(back.retired, t.retired);
  std::string huge = body;
  huge[0] = huge[1] = huge[2] = static_cast<char>(0xff);  // 16 million entries claimed
  EXPECT_THROW(protocol::decode_shared_table(std::as_bytes(std::span(huge)), "p"), Error);

  // A mapping of a block larger than its file is refused, naming the producer.
  shm::Arena arena;
  std::byte* block = arena.allocate(100 * 1024);
  const auto b = arena.find(block);
  ASSERT_TRUE(b);
  try {
    shm::map_block(static_cast<int>(::getpid()), b->fd, b->bytes * 2, "tcp://producer");
    ADD_FAILURE() << "mapped beyond the file";
  } catch (const Error& e) {
    EXPECT_EQ(e.url(), "tcp://producer");
    EXPECT_NE(e.cause().find("smaller"), std::string::npos) << e.cause();
  }
  auto mapping = shm::map_block(static_cast<int>(::getpid()), b->fd, b->bytes, "p");
  block[5] = std::byte{42};
  EXPECT_EQ(mapping->bytes()[5], std::byte{42});  // the same memory, not a copy
  arena.deallocate(block, 100 * 1024);
  EXPECT_EQ(arena.take_retired(), std::vector<std::uint64_t>{b->serial});
  EXPECT_FALSE(arena.find(block));
  EXPECT_EQ(mapping->bytes()[5], std::byte{42});  // a mapping outlives the producer's block
}

}  // namespace
}  // namespace wds
