// HTTP(S) byte sources through the HTTP client (lib/storage/http_client.hpp): a resource's body
// read as one response (HttpBodySource), or in ranged parts read in parallel
// (RangedPartsSource).
//
// A body source's transfer thread runs the requests; the response handler fills a chunk of its
// own, outside any lock, and publishes it to a bounded queue when it holds 256 KiB (or the
// attempt ends), waiting while the queue is full (until a quarter of it is read); so memory stays
// bounded and the network overlaps the reader's work. A source on its reader's thread has no
// thread: its request goes out when it is opened, and read() moves the transfer on until a
// chunk is ready, so between reads only the socket's buffer fills. That is how a resource is read
// from a host where one GET per shard does (PartsRecord): a thread handing chunks over costs the
// reader a wake-up and a core's cache per chunk, and a transfer ahead only takes from the shard
// being read (bench/README.md, "Object stores"). read() hands out one published chunk at a time;
// spent chunks are kept for reuse rather than reallocated. Each attempt asks for the bytes from the
// first one not yet delivered (a Range request after the first), so a broken transfer resumes
// exactly where it stopped and nothing is delivered twice. The retry hook (OpenOptions::on_retry)
// is called on the thread that runs the transfer (its own or the reader's), outside the lock.
#include "lib/storage/http_source.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "lib/fork.hpp"
#include "lib/storage/backends.hpp"
#include "lib/storage/http_client.hpp"
#include "lib/storage/upload_sink.hpp"
#include "lib/text.hpp"
#include "wds/bytes.hpp"
#include "wds/error.hpp"

namespace wds {
namespace {

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  return v;
}

// A chunk of a body: a buffer and the bytes filled in it. Buffers are Bytes, whose storage is
// recycled across sources (a shard's source lives for a few MB, and a fresh 512 KiB buffer cost
// a page fault per 4 KiB written into it: ~5% of a wds bench over HTTP).
struct Chunk {
  static constexpr std::size_t kPublishAt = 256 * 1024;  // published when it holds this much
  // Room for curl's larger writes (CURLOPT_BUFFERSIZE) to land whole, mostly; a write that
  // does not fit goes on in the next chunk.
  static constexpr std::size_t kCapacity = kPublishAt + 256 * 1024;
  Bytes buffer{kCapacity};
  std::size_t size = 0;
  bool empty() const { return size == 0; }
};

class HttpBodySource final : public ByteSource {
 public:
  // Told on the transfer thread, outside the lock: `on_end` when the transfer ends; `on_probe`
  // with the rate (bytes per second) of the first `probe` body bytes and the position after
  // them; it may answer a new end for the body (a byte from that position on), or to be asked
  // again at the next writes, with the same rate and the position then, until it answers without.
  struct ProbeAnswer {
    std::optional<std::uint64_t> cut;
    bool again = false;
  };
  using Probe = std::function<ProbeAnswer(double rate, std::uint64_t at)>;
  // Told on the transfer thread at the first body byte of a source that measures its
  // connection (on_probe), with the body's size if known and the position: the rate to take as
  // the connection's, measured by another source meanwhile; or nullopt to measure it. Returns
  // soon after `stop` is set.
  using WaitTurn = std::function<std::optional<double>(
      std::optional<std::uint64_t> size, std::uint64_t at, const std::atomic<bool>& stop)>;
  // A source with a transfer thread; `on_end`, `on_probe` and `wait_turn` are told on it.
  HttpBodySource(std::string url, RequestFactory make, http::Client client, std::uint64_t offset,
                 std::optional<std::uint64_t> length, std::function<void()> on_end = nullptr,
                 Probe on_probe = nullptr, std::size_t probe = 0, WaitTurn wait_turn = nullptr)
      : ByteSource(std::move(url)),
        make_(std::move(make)),
        client_(std::move(client)),
        on_end_(std::move(on_end)),
        on_probe_(std::move(on_probe)),
        wait_turn_(std::move(wait_turn)),
        probe_(probe),
        next_(offset),
        end_(length ? std::optional<std::uint64_t>(offset + *length) : std::nullopt),
        first_offset_(offset) {
    thread_ = std::thread([this] { run(); });
  }
  // Told on the reader's thread when a body read there is complete: its bytes, and the seconds
  // from its first byte to its last (the reader's pace included).
  using Delivered = std::function<void(std::uint64_t bytes, double seconds)>;
  // A source on its reader's thread: the request goes out now, and read() moves it on.
  struct OnReader {};
  HttpBodySource(OnReader, std::string url, RequestFactory make, http::Client client,
                 std::uint64_t offset, std::optional<std::uint64_t> length,
                 Delivered on_delivered = nullptr)
      : ByteSource(std::move(url)),
        make_(std::move(make)),
        client_(std::move(client)),
        probe_(0),
        next_(offset),
        end_(length ? std::optional<std::uint64_t>(offset + *length) : std::nullopt),
        on_reader_(true),
        on_delivered_(std::move(on_delivered)),
        first_offset_(offset) {
    try {
      if (!begin()) finished_ = true;
    } catch (...) {  // thrown by read(), as a transfer thread's errors are
      error_ = std::current_exception();
      finished_ = true;
    }
    returned_at_ = Clock::now();  // until the first read(), the reader is not waiting
  }
  ~HttpBodySource() override {
    stop_ = true;  // aborts a transfer in progress at its next progress callback
    {
      std::lock_guard lock(mu_);
      cancelled_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    transfer_.reset();  // before the attempt and the request it uses
  }

  std::span<const std::byte> read() override {
    std::unique_lock lock(mu_);
    if (out_) {  // the last chunk handed out is spent now; if lent, once its loans are freed
      out_->size = 0;
      (detail::bytes_shared(out_->buffer) ? lent_ : spare_).push_back(std::move(*out_));
      out_.reset();
    }
    for (std::size_t i = 0; i < lent_.size();) {
      if (detail::bytes_shared(lent_[i].buffer)) {
        ++i;
      } else {
        spare_.push_back(std::move(lent_[i]));
        lent_[i] = std::move(lent_.back());
        lent_.pop_back();
      }
    }
    if (on_reader_) {  // its transfer moves on here, outside the lock (its handler takes it)
      lock.unlock();
      drive();
      lock.lock();
    }
    cv_.wait(lock, [&] { return !ready_.empty() || finished_; });
    if (ready_.empty()) {
      if (error_) std::rethrow_exception(error_);
      return {};
    }
    out_ = std::move(ready_.front());
    ready_.pop_front();
    const std::size_t before = queued_;
    queued_ -= out_->size;
    // A transfer thread waits for room only with the queue full, above refill_at(): it is woken
    // when the queue drops to refill_at(), once.
    if (before > refill_at() && queued_ <= refill_at()) cv_.notify_all();
    if (on_reader_) returned_at_ = Clock::now();
    return out_->buffer.span().first(out_->size);
  }

  // Lends from the chunk handed out last, while fewer than kMaxLent earlier chunks are still
  // lent (a consumer holding samples, a shuffle buffer, would otherwise keep every chunk).
  // Reader's thread only, as read(): the transfer thread touches neither out_ nor lent_.
  Bytes lend(std::span<const std::byte> part) override {
    if (!out_ || lent_.size() >= kMaxLent) return Bytes::copy_of(part);
    return detail::lend_bytes(out_->buffer, part);
  }

  std::optional<std::uint64_t> size() const override {
    std::lock_guard lock(mu_);
    return total_;
  }
  // Where the body asked for starts.
  std::uint64_t offset() const noexcept { return first_offset_; }
  // One past the last byte handed to its queue so far (read or not).
  std::uint64_t arrived_to() const {
    std::lock_guard lock(mu_);
    return first_offset_ + published_;
  }
  // True once the transfer ended: everything is buffered (or it failed).
  bool complete() const {
    std::lock_guard lock(mu_);
    return finished_;
  }
  // True once the transfer ended in an error (read() throws it after the bytes before it).
  bool failed() const {
    std::lock_guard lock(mu_);
    return finished_ && error_;
  }

 private:
  // One attempt: what its response said about itself, reset for every response (redirects
  // send several).
  struct Attempt final : http::ResponseHandler {
    HttpBodySource* self = nullptr;
    std::uint64_t start = 0;  // the absolute byte asked for
    long status = 0;
    bool checked = false;  // the status was looked at (on the first body byte)
    bool error_body = false;
    std::string body;        // of an error response, first bytes only
    std::uint64_t skip = 0;  // bytes to drop: the server ignored our Range
    bool progressed = false;
    std::uint64_t delivered = 0;  // body bytes handed on
    std::optional<std::uint64_t> length, range_start, range_total;
    std::optional<std::string> retry_after;
    std::exception_ptr permanent;

    void on_status(long s) override {
      status = s;
      length.reset();
      range_start.reset();
      range_total.reset();
      retry_after.reset();
    }
    void on_header(std::string_view name, std::string_view value) override {
      if (name == "retry-after") {
        retry_after = std::string(value);
      } else if (name == "content-length") {
        length = parse_u64(value);
      } else if (name == "content-range") {
        // "bytes START-END/TOTAL" (TOTAL may be '*')
        std::size_t bytes = value.find("bytes");
        if (bytes != std::string_view::npos) {
          std::string_view rest = value.substr(bytes + 5);
          range_start = parse_u64(rest);
          std::size_t slash = rest.find('/');
          if (slash != std::string_view::npos) range_total = parse_u64(rest.substr(slash + 1));
        }
      }
    }
    bool on_body(std::span<const std::byte> bytes) override { return self->write(*this, bytes); }
    // A stalled transfer stops at once when the source is destroyed, instead of at the
    // low-speed timeout.
    bool cancelled() override { return self->stop_.load(); }
    // On the reader's thread, a step stops once a chunk is ready for read(). No lock: there,
    // no other thread touches ready_.
    bool paused() override { return self->on_reader_ && !self->ready_.empty(); }
  };

  // Looks at the response once its body starts: deliver, skip, or keep as an error body.
  void check(Attempt& a) {
    a.checked = true;
    if (a.status < 200 || a.status >= 300) {
      a.error_body = true;
      return;
    }
    std::lock_guard lock(mu_);
    if (a.status == 206) {
      if (!a.range_start || *a.range_start != a.start) {
        a.permanent = std::make_exception_ptr(Error::corrupt_data(
            url(), "",
            "asked for bytes from " + std::to_string(a.start) + ", the server sent " +
                (a.range_start ? "bytes from " + std::to_string(*a.range_start)
                               : std::string("a partial answer without Content-Range"))));
        return;
      }
      if (a.range_total && !total_) total_ = a.range_total;
    } else {
      // A full answer: to a Range request, the server ignored it; skip what we already have.
      a.skip = a.start;
      if (a.length && !total_) total_ = a.length;
    }
  }

  bool write(Attempt& a, std::span<const std::byte> bytes) {
    if (!a.checked) check(a);
    if (a.permanent) return false;
    if (a.error_body) {
      a.body.append(
          reinterpret_cast<const char*>(bytes.data()),
          std::min<std::size_t>(bytes.size(), 2048 - std::min<std::size_t>(a.body.size(), 2048)));
      return true;
    }
    std::size_t drop = static_cast<std::size_t>(std::min<std::uint64_t>(a.skip, bytes.size()));
    a.skip -= drop;
    bytes = bytes.subspan(drop);
    std::size_t n = bytes.size();
    if (end_) {  // a server that ignored our Range end sends more than asked: stop there
      if (next_ >= *end_) return false;
      n = static_cast<std::size_t>(std::min<std::uint64_t>(n, *end_ - next_));
    }
    if (n == 0) return true;
    next_ += n;  // no lock: the chunk is not published yet
    if (on_reader_ && !first_byte_at_) first_byte_at_ = Clock::now();
    a.progressed = true;
    a.delivered += n;
    if (on_probe_ && !probed_all_) probe_rate(n);
    for (std::size_t done = 0; done < n;) {
      const std::size_t piece = std::min(n - done, Chunk::kCapacity - fill_.size);
      std::memcpy(fill_.buffer.data() + fill_.size, bytes.data() + done, piece);
      fill_.size += piece;
      done += piece;
      if (fill_.size >= Chunk::kPublishAt && !publish()) return false;
    }
    return true;
  }

  // Measures the rate from the first body byte over probe_ bytes and tells on_probe_, which
  // may end the body earlier, or ask to be told again.
  void probe_rate(std::size_t n) {
    using Clock = std::chrono::steady_clock;
    std::optional<double>& rate = probe_rate_;
    if (!rate && probed_ == 0 && wait_turn_) {
      std::optional<std::uint64_t> size;
      {
        std::lock_guard lock(mu_);
        size = total_;
      }
      // The first bytes wait in the socket meanwhile; a rate given is taken as measured.
      rate = std::exchange(wait_turn_, nullptr)(size, next_ - n, stop_);
    }
    if (!rate) {
      if (probed_ == 0) probe_start_ = Clock::now();
      probed_ += n;
      if (probed_ < probe_) return;
      // The connection's rate: not the time the reader's pace held the transfer back.
      const double seconds =
          std::chrono::duration<double>(Clock::now() - probe_start_ - probe_blocked_).count();
      rate = static_cast<double>(probed_) / std::max(seconds, 1e-6);
    }
    ask_probe();
  }

  // Tells on_probe_ the rate and the position (transfer thread; without mu_, which on_probe_'s
  // owner may take after its own lock).
  void ask_probe() {
    const ProbeAnswer answer = on_probe_(*probe_rate_, next_);
    probed_all_ = !answer.again;
    if (const std::optional<std::uint64_t>& cut = answer.cut) {
      if (!end_ || *cut < *end_) end_ = std::max(*cut, next_);
    }
  }
  static constexpr std::chrono::milliseconds kAskAgainEvery{5};

  // Hands the filled chunk to the reader; a transfer thread waits while the queue holds
  // buffer_bytes. (On the reader's thread the queue holds what one step brought, at most what
  // the socket had buffered.)
  bool publish() {
    if (fill_.empty()) return true;
    std::unique_lock lock(mu_);
    if (!on_reader_ && queued_ >= client_.options().buffer_bytes && !cancelled_) {
      const auto waited_from = std::chrono::steady_clock::now();
      auto room = [&] { return queued_ <= refill_at() || cancelled_; };
      // A probe to be asked again (a verdict awaited) is asked every 5 ms meanwhile: a shard
      // opened ahead, not read yet, opens its parts as soon as they are decided.
      while (probe_rate_ && !probed_all_ && !cv_.wait_for(lock, kAskAgainEvery, room)) {
        lock.unlock();
        ask_probe();
        lock.lock();
      }
      cv_.wait(lock, room);
      const auto waited = std::chrono::steady_clock::now() - waited_from;
      blocked_ += waited;
      if (!probed_all_) probe_blocked_ += waited;
    }
    if (cancelled_) return false;
    queued_ += fill_.size;
    published_ += fill_.size;
    ready_.push_back(std::move(fill_));
    if (!spare_.empty()) {
      fill_ = std::move(spare_.back());
      spare_.pop_back();
    } else {
      fill_ = Chunk();
    }
    cv_.notify_all();
    return true;
  }

  // A full queue wakes its transfer thread once a quarter of it is read, not after every chunk
  // read: a thread woken per chunk would ping-pong with the reader, a wake-up per 256 KiB. (Half
  // was slower from nginx on loopback: the reader drained the rest before the thread refilled.)
  std::size_t refill_at() const { return client_.options().buffer_bytes / 4 * 3; }

  bool cancelled() {
    std::lock_guard lock(mu_);
    return cancelled_;
  }

  void run() {
    try {
      transfer();
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard lock(mu_);
      finished_ = true;
    }
    cv_.notify_all();
    if (on_end_) on_end_();
  }

  void transfer() {
    for (;;) {
      if (cancelled()) return;
      Attempt a;
      std::optional<http::Request> request = next_request(a);
      if (!request) return;
      const auto started = Clock::now();
      blocked_ = {};
      http::Outcome outcome = client_.perform(*request, a);
      // The attempt's own time: not the time it waited for the reader to make room.
      const double seconds =
          std::chrono::duration<double>(Clock::now() - started - blocked_).count();
      if (!publish() || cancelled()) return;
      const std::optional<std::chrono::milliseconds> backoff = after(a, outcome, seconds);
      if (!backoff) return;
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, *backoff, [&] { return cancelled_; });
    }
  }

  // On the reader's thread: starts the next attempt; false if everything asked for is
  // delivered.
  bool begin() {
    attempt_ = std::make_unique<Attempt>();
    std::optional<http::Request> request = next_request(*attempt_);
    if (!request) {
      attempt_.reset();
      return false;
    }
    request_ = std::move(*request);
    started_ = Clock::now();
    blocked_ = {};
    transfer_ = client_.start(request_, *attempt_);
    return true;
  }

  // On the reader's thread: moves the transfer on until a chunk is ready or it ended, retrying
  // as the transfer thread does (the backoff waited here).
  void drive() {
    {
      std::lock_guard lock(mu_);
      if (!ready_.empty() || finished_) return;
    }
    // The time the reader spent away is not the server's slowness.
    if (transfer_) blocked_ += Clock::now() - returned_at_;
    try {
      for (;;) {
        if (!transfer_) {
          if (retry_at_) std::this_thread::sleep_until(*std::exchange(retry_at_, std::nullopt));
          if (!begin()) break;
        }
        // The wait bounds a step while nothing arrives; curl's own timeouts (connect, low
        // speed) end a transfer that stalls.
        std::optional<http::Outcome> outcome = transfer_->step(std::chrono::milliseconds(1000));
        if (outcome) {
          transfer_.reset();
          const double seconds =
              std::chrono::duration<double>(Clock::now() - started_ - blocked_).count();
          publish();
          const std::optional<std::chrono::milliseconds> backoff =
              after(*attempt_, *outcome, seconds);
          attempt_.reset();
          if (!backoff) {
            if (on_delivered_ && first_byte_at_) {
              on_delivered_(next_ - first_offset_,
                            std::chrono::duration<double>(Clock::now() - *first_byte_at_).count());
            }
            break;
          }
          retry_at_ = Clock::now() + *backoff;
        }
        std::lock_guard lock(mu_);
        if (!ready_.empty()) return;
      }
    } catch (...) {
      transfer_.reset();
      attempt_.reset();
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
    }
    publish();  // the last bytes, if an error ended the transfer before they made a chunk
    std::lock_guard lock(mu_);
    finished_ = true;
  }

  // The request of the next attempt, asking for the bytes from the first one not delivered; or
  // nullopt if every byte asked for was.
  std::optional<http::Request> next_request(Attempt& a) {
    if (end_ && next_ >= *end_) return std::nullopt;
    http::Request made = make_();
    a.self = this;
    a.start = next_;
    if (a.start > 0 || end_) {
      made.headers.push_back("Range: bytes=" + std::to_string(a.start) + "-" +
                             (end_ ? std::to_string(*end_ - 1) : std::string()));
    }
    http::Request request = client_.request(made.method, std::move(made.url), made.headers);
    request.follow_redirects = true;
    return request;
  }

  // What the end of an attempt (its last bytes published; `seconds` its own time) means:
  // nullopt if the body is complete, else the wait before the next attempt. Throws what
  // retrying cannot mend, and once the retries run out.
  std::optional<std::chrono::milliseconds> after(Attempt& a, const http::Outcome& outcome,
                                                 double seconds) {
    if (a.permanent) std::rethrow_exception(a.permanent);
    if (end_ && next_ >= *end_) return std::nullopt;  // all asked for (we may have cut it short)
    const long status = outcome.status ? outcome.status : a.status;

    std::string failure;
    const bool responded = outcome.kind == http::Outcome::Kind::responded;
    if (responded && status >= 200 && status < 300) {
      // Complete at the end asked for, or at the resource's end when that comes first (a part
      // asked for past the end of a small resource).
      std::optional<std::uint64_t> total = end_;
      if (std::optional<std::uint64_t> known = size(); known && (!total || *known < *total)) {
        total = known;
      }
      if (!total || next_ >= *total) return std::nullopt;  // complete
      if (status == 200 && !size()) return std::nullopt;   // a whole answer of unknown length
      failure = "the body ended after " + std::to_string(next_) + " of " + std::to_string(*total) +
                " bytes";
    } else if (responded && status == 416 && (a.start > 0 || end_)) {
      return std::nullopt;  // nothing left after the bytes already delivered (or an empty one)
    } else {
      http::Outcome o = outcome;
      o.status = status;
      failure = client_.failure(o, "", a.body);
    }
    // Transient: try again from the first byte not delivered. Attempts that made progress
    // do not count against the limit, unless their bytes only trickled in (on average below
    // the low-speed limit): else a server sending 10 bytes a second is retried forever.
    if (a.progressed) {
      const long limit = client_.options().low_speed_bytes;
      const double rate = static_cast<double>(a.delivered) / std::max(seconds, 1e-3);
      if (limit <= 0 || rate >= static_cast<double>(limit)) {
        client_.progressed();
      } else {
        char text[160];
        std::snprintf(text, sizeof text,
                      " (%llu bytes in %.1f s: %.0f bytes/s, below the low-speed limit of %ld "
                      "bytes/s)",
                      static_cast<unsigned long long>(a.delivered), seconds, rate, limit);
        failure += text;
      }
    }
    return client_.retry("", failure, next_, std::nullopt,
                         http::retry_after_of(status, a.retry_after),
                         http::is_throttling(status, a.retry_after, a.body));
  }

  using Clock = std::chrono::steady_clock;

  RequestFactory make_;
  http::Client client_;  // the transfer thread's (or the reader's)
  std::function<void()> on_end_;
  Probe on_probe_;
  WaitTurn wait_turn_;
  std::size_t probe_;
  std::chrono::steady_clock::time_point probe_start_;    // the transfer thread's, as are
  std::size_t probed_ = 0;                               // these two
  std::chrono::steady_clock::duration blocked_{};        // and these: waited in publish(),
  std::chrono::steady_clock::duration probe_blocked_{};  // of it while probing
  bool probed_all_ = false;
  std::optional<double> probe_rate_;  // the transfer thread's: measured or taken
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Chunk fill_;                   // the transfer's chunk being filled
  std::deque<Chunk> ready_;      // published, not yet read
  std::vector<Chunk> spare_;     // read and spent, for reuse
  std::size_t queued_ = 0;       // bytes in ready_
  std::uint64_t published_ = 0;  // bytes published so far, read or not
  std::optional<Chunk> out_;     // handed to the reader by the last read()
  // Spent chunks that lent bytes still share (reader's thread only): reused once they do not.
  static constexpr std::size_t kMaxLent = 8;
  std::vector<Chunk> lent_;
  std::uint64_t next_;                // absolute position of the next byte to deliver
  std::optional<std::uint64_t> end_;  // one past the last byte asked for
  std::optional<std::uint64_t> total_;
  bool finished_ = false;
  bool cancelled_ = false;
  std::atomic<bool> stop_{false};  // cancelled_, readable without the lock
  std::exception_ptr error_;
  // On the reader's thread (no transfer thread): the attempt under way, in this order (the
  // transfer uses the other two), when it started, when read() last returned, and when the
  // next attempt may start after a failure.
  const bool on_reader_ = false;
  std::unique_ptr<Attempt> attempt_;
  http::Request request_;
  std::unique_ptr<http::Transfer> transfer_;
  Clock::time_point started_{}, returned_at_{};
  std::optional<Clock::time_point> retry_at_;
  Delivered on_delivered_;
  const std::uint64_t first_offset_ = 0;            // where the body asked for starts
  std::optional<Clock::time_point> first_byte_at_;  // when its first byte arrived
  std::thread thread_;                              // last: started when everything else is ready
};

// Whether one GET per shard does on a host (scheme and authority of the URL), for the whole
// process: its ranged parts did not pay off lately, or its connections were measured fast.
// Parts pay off when a connection is capped (an object store's 50-200 MB/s); they cost
// threads, connections and buffers for nothing when the bottleneck is shared (a busy server,
// the network) or the reader is the slower side: then the parts of a shard download no faster
// than its first GET did alone, although that GET's first bytes came slower than
// single_stream_rate (readers opened at once share the server while they measure it). After
// parts that did not pay off, the next shards from the host are read by one GET: 16 of them,
// doubling each time parts fail again (up to 256); parts that pay off clear the record. A first
// GET measured at single_stream_rate or faster has the next 16 read by one GET without being
// measured, doubling each time a first GET is measured fast again (up to 256; one that takes
// another's fast rate renews the record without doubling it). A shard read by one GET that
// arrived at single_stream_rate or faster, its reader's pace included, renews it the same way:
// its connection is proven fast, while a first GET measured again would share the server or the
// link with the shard being read (a host between one and two times single_stream_rate looked
// capped every 16 shards). Such a shard is read on its reader's thread (HttpBodySource::OnReader):
// opened ahead, it sends its request and moves no further until it is read. On a host whose
// bottleneck is shared (or whose connections are fast), a transfer ahead only takes from the shard
// being read, and a transfer thread only costs the reader; where parts pay off (each connection
// capped), shards ahead measure their connection and open their parts before their turn, which is
// what keeps the reader fed. One first GET per host measures at a time (wait_to_probe), and those
// opened meanwhile or within kRateFresh of its measurement take its rate: first GETs opened at once
// (a worker's first shard and those ahead, other workers' first shards) would share the server
// while they measure it, and a fast host measured in shares looked capped: its first shards went to
// parts, at several times the memory (bench/README.md, "Object stores"). While the host has no
// verdict that parts pay off, one shard with a slow rate at a time tries them (a trial, take_turn)
// and is judged on its first round of parts; the others with a slow rate (measured or taken) read
// on by their first GET until that verdict, then on by it or in parts from there, as it says
// (without a verdict within kVerdictWait, on by it). Behind a shared link slower than
// single_stream_rate, every worker's first shards, and those ahead, went to parts at once before
// the first verdict, and again each time the shards to read by one GET ran out, each with its
// (parallel + 2) parts' buffers: 4 workers over 2 Gbit/s peaked at 378-493 MB, against 64-72 MB
// by one GET each.
class PartsRecord {
 public:
  static constexpr double kPaidOff = 1.5;  // parts' rate over the first GET's, at least
  // How long a first GET waits for another's measurement at most (a server slow to answer).
  static constexpr std::chrono::milliseconds kProbeWait{2000};
  // How long a shard with a slow rate asks for another's trial of parts to be judged, at most:
  // meanwhile, and after it, it reads on by its first GET. (A trial over a slow shared link may
  // take longer, while shards being read share the link with it; then parts would not pay.)
  static constexpr std::chrono::milliseconds kVerdictWait{2000};
  // How long a measured rate stands for the host's next first GETs.
  static constexpr std::chrono::milliseconds kRateFresh{1000};

  // For a first GET from `host` about to measure its connection: the rate another one measured
  // less than kRateFresh ago; else, while another one measures, waits for its rate and returns
  // it. Else (none measuring, the other ended without a rate, or `longest` passed or `stop` was
  // set) marks this one as measuring and returns nullopt; it tells probe_ended() once it has
  // measured or ended.
  static std::optional<double> wait_to_probe(const std::string& host,
                                             std::chrono::milliseconds longest,
                                             const std::atomic<bool>& stop) {
    const auto now = std::chrono::steady_clock::now();
    const auto until = now + longest;
    std::unique_lock lock(mu());
    Entry& e = hosts()[host];
    if (e.probed_at && now - *e.probed_at < kRateFresh) return e.probed_rate;
    if (e.probing > 0) {
      const auto seen = e.probed_at;
      while (e.probing > 0 && e.probed_at == seen && !stop &&
             std::chrono::steady_clock::now() < until) {
        // In slices: `stop` is set without this lock.
        probe_cv().wait_for(lock, std::chrono::milliseconds(5));
      }
      if (e.probed_at != seen) return e.probed_rate;
    }
    ++e.probing;
    return std::nullopt;
  }
  // A first GET marked by wait_to_probe measured `rate`, or ended without measuring (nullopt).
  static void probe_ended(const std::string& host, std::optional<double> rate) {
    {
      std::lock_guard lock(mu());
      Entry& e = hosts()[host];
      if (e.probing > 0) --e.probing;
      if (rate) {
        e.probed_rate = *rate;
        e.probed_at = std::chrono::steady_clock::now();
      }
    }
    probe_cv().notify_all();
  }

  // What a shard whose first GET came slower than single_stream_rate does.
  enum class Turn {
    one_get,  // read on by one GET (counted as skip() counts)
    parts,    // open parts
    trial,    // open parts as the host's trial: tell judged() or trial_ended()
    wait,     // read on by its first GET while another shard's trial runs, and ask again
  };
  // Without a verdict that parts pay off on `host`, one shard at a time tries them (a trial);
  // the others wait for its verdict.
  static Turn take_turn(const std::string& host) {
    std::lock_guard lock(mu());
    Entry& e = hosts()[host];
    if (e.left > 0) {
      --e.left;
      return Turn::one_get;
    }
    if (e.paid_off) return Turn::parts;
    if (e.on_trial) return Turn::wait;
    e.on_trial = true;
    return Turn::trial;
  }
  // How many trials have ended so far, with or without a verdict, on any host: a shard told to
  // wait asks again once it has changed. Read before take_turn().
  static std::uint64_t trials_ended() { return ended().load(std::memory_order_acquire); }
  // The host's trial ended without a verdict (its shard did not open parts, or closed first).
  static void trial_ended(const std::string& host) {
    std::lock_guard lock(mu());
    end_trial(hosts()[host]);
  }

  // True if the next shard from `host` is to be read by one GET (and counts it).
  static bool skip(const std::string& host) {
    std::lock_guard lock(mu());
    auto it = hosts().find(host);
    if (it == hosts().end() || it->second.left == 0) return false;
    --it->second.left;
    return true;
  }
  // A first GET from `host` measured at single_stream_rate or faster.
  // `measured` false: the host was not measured again: a first GET took a rate measured fast by
  // another (wait_to_probe), or a shard read by one GET arrived that fast, its reader's pace
  // included. That renews the record without doubling it.
  static void fast(const std::string& host, bool measured = true) {
    std::lock_guard lock(mu());
    Entry& e = hosts()[host];
    if (measured || e.fast_next == 0) {
      e.fast_next = e.fast_next == 0 ? 16 : std::min<std::uint32_t>(e.fast_next * 2, 256);
    }
    e.left = std::max(e.left, e.fast_next);
  }
  // A shard's parts were judged; `trial`: it was the host's trial (which ends).
  static void judged(const std::string& host, bool paid_off, bool trial) {
    std::lock_guard lock(mu());
    Entry& e = hosts()[host];
    e.paid_off = paid_off;
    if (paid_off) {  // the record cleared; the measurement stands
      e.left = e.next = e.fast_next = 0;
    } else {
      e.next = e.next == 0 ? 16 : std::min<std::uint32_t>(e.next * 2, 256);
      e.left = e.next;
    }
    if (trial) end_trial(e);
  }

 private:
  struct Entry {
    std::uint32_t left = 0;       // shards still to read by one GET
    std::uint32_t next = 0;       // how many the next failure sets
    std::uint32_t fast_next = 0;  // how many the next fast first GET sets
    std::uint32_t probing = 0;    // first GETs measuring now
    double probed_rate = 0;       // the last rate measured, and when (unset: none yet)
    std::optional<std::chrono::steady_clock::time_point> probed_at;
    bool on_trial = false;  // a shard's parts are on trial, not judged yet
    bool paid_off = false;  // the last verdict
  };
  static std::mutex& mu() {
    static std::mutex& m = detail::new_mutex_held_across_fork();  // never destroyed, as hosts()
    return m;
  }
  // With mu() held.
  static void end_trial(Entry& e) {
    e.on_trial = false;
    ended().fetch_add(1, std::memory_order_release);
  }
  static std::atomic<std::uint64_t>& ended() {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }
  static std::condition_variable& probe_cv() {
    static auto* cv = new std::condition_variable();  // never destroyed, as hosts()
    return *cv;
  }
  static std::map<std::string, Entry>& hosts() {
    static auto* map = new std::map<std::string, Entry>();  // never destroyed: sources may end in
                                                            // static destruction
    return *map;
  }
};

// How many bytes of a first GET measure its connection.
std::size_t probe_bytes(const RangedParts& parts) {
  return static_cast<std::size_t>(std::min<std::uint64_t>(parts.size, std::uint64_t{4} << 20));
}

// "scheme://authority" of a URL, which PartsRecord keys on.
std::string host_of(const std::string& url) {
  return split_authority(url).first;
}

// What opens one more body source over the same resource (a part, or the first GET).
struct BodySourceOpener {
  std::string url;
  RequestFactory make;
  HttpOptions options;
  http::Summary summary;
  RetryHook on_retry;
  std::shared_ptr<http::Transport> transport;

  std::unique_ptr<HttpBodySource> open(std::uint64_t offset, std::optional<std::uint64_t> length,
                                       std::size_t buffer, std::function<void()> on_end,
                                       HttpBodySource::Probe on_probe = nullptr,
                                       std::size_t probe = 0,
                                       HttpBodySource::WaitTurn wait_turn = nullptr) const {
    HttpOptions o = options;
    o.buffer_bytes = std::max(o.buffer_bytes, buffer);
    http::Client client(url, std::move(o), transport, summary, on_retry);
    return std::make_unique<HttpBodySource>(url, make, std::move(client), offset, length,
                                            std::move(on_end), std::move(on_probe), probe,
                                            std::move(wait_turn));
  }
};

// A resource read by one GET while its connection is fast, else as parts by ranged GETs in
// parallel, handed out in order. The first GET asks for everything (as a body source does);
// once its first min(4 MiB, part) bytes have arrived, their rate decides (on its transfer
// thread): at single_stream_rate or faster, the connection is not capped and it reads on; else
// it stops a part further on, and parts from there are opened, more whenever a part's transfer
// ends, while fewer than `parallel` are downloading and fewer than parallel + 2 are held. Each
// part buffers up to a whole part, so a part that finished downloading frees its connection
// for the next one before the reader reaches it. Whether the parts paid off (their first round
// downloaded faster than one connection, and the reader read faster than that) is told to
// PartsRecord, which may have the next shards from the host read by one GET, and which may have
// this one wait for another shard's verdict before it opens parts (take_turn).
class RangedPartsSource final : public ByteSource {
 public:
  RangedPartsSource(BodySourceOpener opener, RangedParts parts, std::uint64_t offset,
                    std::optional<std::uint64_t> length)
      : ByteSource(opener.url),
        opener_(std::move(opener)),
        parts_(parts),
        end_(length ? std::optional<std::uint64_t>(offset + *length) : std::nullopt) {
    std::lock_guard lock(mu_);
    const std::size_t probe = probe_bytes(parts_);
    // It measures its connection alone (PartsRecord::wait_to_probe), unless parts are opened
    // whatever the rate.
    HttpBodySource::WaitTurn wait_turn;
    if (parts_.single_stream_rate > 0) {
      wait_turn = [this, probe](std::optional<std::uint64_t> size, std::uint64_t at,
                                const std::atomic<bool>& stop) -> std::optional<double> {
        {
          // A body that parts would never cut (a small object) measures nothing and waits for
          // nobody.
          std::lock_guard lock(mu_);
          std::optional<std::uint64_t> end = end_;
          if (size && (!end || *size < *end)) end = size;
          if (end && *end <= at + probe + parts_.size) return std::nullopt;
        }
        // The wait holds the transfer in its write: within curl's low-speed time, if set.
        std::chrono::milliseconds longest = PartsRecord::kProbeWait;
        if (opener_.options.low_speed_bytes > 0 && opener_.options.low_speed_time.count() > 0) {
          longest =
              std::min<std::chrono::milliseconds>(longest, opener_.options.low_speed_time / 2);
        }
        std::optional<double> rate =
            PartsRecord::wait_to_probe(host_of(opener_.url), longest, stop);
        std::lock_guard lock(mu_);
        (rate ? followed_ : probing_) = true;
        return rate;
      };
    }
    open_.push_back(opener_.open(
        offset, length, 0, [this] { ended(); },
        [this](double rate, std::uint64_t at) { return probed(rate, at); }, probe,
        std::move(wait_turn)));
  }
  ~RangedPartsSource() override {
    {
      std::lock_guard lock(mu_);
      closing_ = true;  // no part is opened any more
    }
    // Each part's destructor stops and joins its transfer thread; one of them may be waiting
    // for mu_ meanwhile, and returns as soon as it has it.
    std::deque<std::unique_ptr<HttpBodySource>> parts;
    {
      std::lock_guard lock(mu_);
      parts.swap(open_);
      end_trial();
    }
  }

  std::span<const std::byte> read() override {
    using Clock = std::chrono::steady_clock;
    // The reader's pace on this shard: the time it spends between read()s.
    if (returned_at_) reader_busy_ += Clock::now() - *returned_at_;
    returned_at_.reset();
    for (;;) {
      HttpBodySource* front = nullptr;
      {
        std::lock_guard lock(mu_);
        if (open_.empty() && more()) open_part();
        if (open_.empty()) {
          judge_pace();
          return {};
        }
        front = open_.front().get();
      }
      // Parts are only added at the back while this one is read.
      std::span<const std::byte> chunk = front->read();
      last_ = front;
      if (!chunk.empty()) {
        read_bytes_ += chunk.size();
        returned_at_ = Clock::now();
        return chunk;
      }
      last_ = nullptr;
      std::unique_ptr<HttpBodySource> done;  // delivered in full: destroyed outside the lock
      {
        std::lock_guard lock(mu_);
        if (!total_) total_ = open_.front()->size();  // still known once all is read
        done = std::move(open_.front());
        open_.pop_front();
        top_up();
        judge();  // the last part's end may not have been told yet
      }
    }
  }

  std::optional<std::uint64_t> size() const override {
    std::lock_guard lock(mu_);
    if (total_ || open_.empty()) return total_;
    return open_.front()->size();
  }

  // From the part whose chunk read() returned last (reader's thread only, as read()).
  Bytes lend(std::span<const std::byte> part) override {
    return last_ ? last_->lend(part) : Bytes::copy_of(part);
  }

 private:
  bool more() const { return planned_ && next_ < end_.value_or(0); }

  // On the first GET's transfer thread, once it has its rate, and again at its next writes while
  // it waits for another shard's verdict: where it stops, when parts take over.
  HttpBodySource::ProbeAnswer probed(double rate, std::uint64_t at) {
    using Clock = std::chrono::steady_clock;
    // Waiting (per write): nothing to do until a trial has ended, or the wait is over.
    if (wait_ && PartsRecord::trials_ended() == wait_->seen && Clock::now() < wait_->until) {
      return {.cut = std::nullopt, .again = true};
    }
    std::lock_guard lock(mu_);
    end_probe(rate);
    HttpBodySource::ProbeAnswer answer = plan(rate, at);
    if (!answer.again) wait_.reset();
    if (!judge_) end_trial();  // no parts: the host's trial, if this was it, ends without them
    return answer;
  }

  // With mu_ held.
  HttpBodySource::ProbeAnswer plan(double rate, std::uint64_t at) {
    if (closing_ || open_.empty()) return {};
    total_ = open_.front()->size();
    if (!total_) return {};                              // one GET: the size is unknown
    const bool judging = parts_.single_stream_rate > 0;  // 0: parts whatever the rate
    if (judging && rate >= parts_.single_stream_rate) {
      PartsRecord::fast(host_of(opener_.url), !followed_);
      return {};  // one GET: the connection is fast
    }
    if (!end_ || *total_ < *end_) end_ = total_;
    if (*end_ <= at + parts_.size) return {};  // too little left for parts
    if (judging) {
      // Whether the host is read by one GET is asked at opening too; asked again here for shards
      // opened before the host was judged (the first shards of every worker and those opened
      // ahead with them). While another shard tries parts, its verdict decides: meanwhile this
      // one reads on by its first GET.
      const std::uint64_t seen = PartsRecord::trials_ended();
      const auto now = std::chrono::steady_clock::now();
      switch (PartsRecord::take_turn(host_of(opener_.url))) {
        case PartsRecord::Turn::one_get:
          return {};
        case PartsRecord::Turn::wait:
          if (!wait_) wait_ = Wait{.until = now + PartsRecord::kVerdictWait};
          if (now >= wait_->until) return {};  // no verdict in time: one GET
          wait_->seen = seen;
          return {.cut = std::nullopt, .again = true};
        case PartsRecord::Turn::trial:
          trial_ = true;
          break;
        case PartsRecord::Turn::parts:
          break;
      }
    }
    const std::uint64_t cut = at + parts_.size;
    planned_ = true;
    next_ = cut;
    if (judging) {
      judge_ = Judge{std::chrono::steady_clock::now(), at, rate};
    }
    top_up();
    return {.cut = cut};
  }

  void ended() {
    std::lock_guard lock(mu_);
    end_probe(std::nullopt);  // the first GET ended before it measured (small, failed, closed)
    top_up();
    judge();
  }

  // With mu_ held: once the parts opened with the first GET's rest (the first round) have
  // downloaded (the reader may not have read them yet), tells PartsRecord whether they, with what
  // the first GET brought meanwhile, beat the first GET's rate. Called when a transfer ends and
  // when the reader is done with a part. Judged on that first round rather than on the whole
  // shard, the verdict comes a round after the parts open, however large the shard, and shards
  // waiting for a trial's verdict (PartsRecord::take_turn) wait no longer than that. The first
  // GET's rest is not waited for: each part buffers all of itself, but the first GET only
  // buffer_bytes, so its rest waits for the reader, which may be reading another shard, one that
  // waits for this verdict. Parts that paid off are judged once more on the reader's pace
  // (judge_pace()).
  void judge() {
    if (!judge_ || closing_) return;
    const std::uint64_t cut = judge_->at + parts_.size;
    // The first round: the first GET's rest and the parallel - 1 parts opened beside it.
    const std::uint64_t until = std::min(*end_, judge_->at + parts_.parallel * parts_.size);
    if (next_ < until) return;  // not all opened yet
    std::uint64_t first = cut;  // how far the first GET came: all the way once read and gone
    for (const auto& part : open_) {
      if (part->offset() < cut) {
        first = std::min(part->arrived_to(), cut);
      } else if (part->offset() < until && !part->complete()) {
        return;
      }
    }
    const double seconds = std::max(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - judge_->from).count(),
        1e-6);
    const std::uint64_t bytes = (until - cut) + (first > judge_->at ? first - judge_->at : 0);
    const bool paid_off =
        static_cast<double>(bytes) / seconds >= PartsRecord::kPaidOff * judge_->rate;
    PartsRecord::judged(host_of(opener_.url), paid_off, std::exchange(trial_, false));
    if (paid_off) pace_rate_ = judge_->rate;
    judge_.reset();
  }

  // With mu_ held, on the reader's thread once it has read the whole shard: parts that downloaded
  // faster than one connection still gain nothing for a reader slower than that (a decoding one),
  // and their buffers cost. Its pace is the bytes over the time it spent between read()s, not the
  // time it waited in them (for the parts, or before its turn, for the shards before this one).
  void judge_pace() {
    if (!pace_rate_ || closing_) return;
    const double busy = std::max(std::chrono::duration<double>(reader_busy_).count(), 1e-6);
    if (static_cast<double>(read_bytes_) / busy < PartsRecord::kPaidOff * *pace_rate_) {
      PartsRecord::judged(host_of(opener_.url), false, /*trial=*/false);
    }
    pace_rate_.reset();
  }

  // With mu_ held: tells the first GETs from the host waiting for this one's rate.
  void end_probe(std::optional<double> rate) {
    if (std::exchange(probing_, false)) PartsRecord::probe_ended(host_of(opener_.url), rate);
  }

  // With mu_ held: a trial that will not be judged ends.
  void end_trial() {
    if (std::exchange(trial_, false)) PartsRecord::trial_ended(host_of(opener_.url));
  }

  // With mu_ held.
  void top_up() {
    if (closing_ || !planned_) return;
    std::size_t downloading = 0;
    for (const auto& part : open_) downloading += part->complete() ? 0 : 1;
    while (more() && downloading < parts_.parallel && open_.size() < parts_.parallel + 2) {
      open_part();
      ++downloading;
    }
  }

  // With mu_ held.
  void open_part() {
    const std::uint64_t length = std::min(parts_.size, *end_ - next_);
    open_.push_back(
        opener_.open(next_, length, static_cast<std::size_t>(parts_.size), [this] { ended(); }));
    next_ += length;
  }

  BodySourceOpener opener_;
  RangedParts parts_;
  mutable std::mutex mu_;
  std::deque<std::unique_ptr<HttpBodySource>> open_;  // in order; the front one is being read
  HttpBodySource* last_ = nullptr;    // the part read() returned a chunk of last (reader's thread)
  std::uint64_t next_ = 0;            // where the next part starts, once planned
  std::optional<std::uint64_t> end_;  // one past the last byte to read, when known
  std::optional<std::uint64_t> total_;
  bool planned_ = false;  // parts follow the first GET
  bool closing_ = false;
  bool probing_ = false;   // the first GET measures its connection (PartsRecord::wait_to_probe)
  bool followed_ = false;  // it took another first GET's rate instead
  bool trial_ = false;     // its parts are the host's trial (PartsRecord::take_turn)
  // While the first GET waits for another shard's verdict (its transfer thread's): until when at
  // most, and PartsRecord::trials_ended() when it last asked.
  struct Wait {
    std::chrono::steady_clock::time_point until;
    std::uint64_t seen = 0;
  };
  std::optional<Wait> wait_;
  // Parts planned, not judged yet: when, from which byte, and the first GET's rate until then.
  struct Judge {
    std::chrono::steady_clock::time_point from;
    std::uint64_t at;
    double rate;
  };
  std::optional<Judge> judge_;
  // Parts that paid off, to be judged on the reader's pace: the first GET's rate. Then the
  // reader's thread's: the bytes it was handed, the time it spent between read()s, and when the
  // last read() returned.
  std::optional<double> pace_rate_;
  std::uint64_t read_bytes_ = 0;
  std::chrono::steady_clock::duration reader_busy_{};
  std::optional<std::chrono::steady_clock::time_point> returned_at_;
};

}  // namespace

std::size_t default_parallel_parts() {
  static const std::size_t value = [] {
    const std::optional<std::uint64_t> v = env_number("WDS_PARALLEL_PARTS");
    return v && *v >= 1 ? static_cast<std::size_t>(*v) : std::size_t{4};
  }();
  return value;
}

RangedParts parts_of(const OpenOptions& options) {
  return RangedParts{std::max<std::size_t>(options.parallel_parts, 1),
                     std::max<std::uint64_t>(options.part_size, 64 * 1024),
                     static_cast<double>(options.single_stream_rate)};
}

void record_one_get_host(const std::string& host) {
  PartsRecord::fast(host);
}

std::unique_ptr<ByteSource> open_http_body(std::string url, RequestFactory make,
                                           const HttpOptions& options, std::uint64_t offset,
                                           http::Summary summary,
                                           std::optional<std::uint64_t> length, RetryHook on_retry,
                                           std::shared_ptr<http::Transport> transport,
                                           std::optional<RangedParts> parts) {
  RangedParts p = parts ? *parts : parts_of(OpenOptions{});
  if (!transport) transport = http::curl_transport();
  const bool whole = p.parallel <= 1 || (length && *length <= p.size);
  // A host where one GET does: no parts, and no thread (PartsRecord).
  const bool one_get = !whole && p.single_stream_rate > 0 && PartsRecord::skip(host_of(url));
  if (whole || one_get) {
    http::Client client(url, options, std::move(transport), std::move(summary),
                        std::move(on_retry));
    if (one_get) {
      // A body at least a measurement long that arrived fast renews the host's record.
      auto delivered = [host = host_of(url), least = probe_bytes(p), fast = p.single_stream_rate](
                           std::uint64_t bytes, double seconds) {
        if (bytes >= least && static_cast<double>(bytes) >= fast * seconds) {
          PartsRecord::fast(host, false);
        }
      };
      return std::make_unique<HttpBodySource>(HttpBodySource::OnReader{}, std::move(url),
                                              std::move(make), std::move(client), offset, length,
                                              std::move(delivered));
    }
    return std::make_unique<HttpBodySource>(std::move(url), std::move(make), std::move(client),
                                            offset, length);
  }
  return std::make_unique<RangedPartsSource>(
      BodySourceOpener{url, std::move(make), options, std::move(summary), std::move(on_retry),
                       std::move(transport)},
      p, offset, length);
}

std::string http_get_body(const std::string& url, const RequestFactory& make,
                          const HttpOptions& options, http::Summary summary, RetryHook on_retry,
                          std::shared_ptr<http::Transport> transport) {
  auto source = open_http_body(url, make, options, 0, std::move(summary), std::nullopt,
                               std::move(on_retry), std::move(transport), RangedParts{});
  std::string body;
  for (auto chunk = source->read(); !chunk.empty(); chunk = source->read()) {
    body.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
  }
  return body;
}

std::unique_ptr<ByteSource> open_http_source(const std::string& url, const OpenOptions& options) {
  const HttpOptions& http = options_of<HttpOptions>(options.backend_options);
  RequestFactory make = [url] { return http::Request{.url = url}; };
  return open_http_body(url, make, http, options.offset, nullptr, options.length, options.on_retry,
                        http::transport_for(options.backend_options), parts_of(options));
}

Backend http_backend() {
  return Backend{
      .schemes = {"http", "https"},
      .open = open_http_source,
      .open_sink = open_http_sink,
  };
}

}  // namespace wds
