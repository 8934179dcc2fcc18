// The data service's control messages: fixed little-endian fields, strings as u32 length and
// bytes. Decoding checks every length against what is left, so a hostile peer gets an error.
#include "service/protocol.hpp"

#include <cstring>

namespace wds::protocol {
namespace {

constexpr char kMagic[4] = {'W', 'D', 'S', 'S'};
// Strings in control messages: a token, a message, a stream state (a few KB, more with large
// shuffle buffers); the producer caps whole messages before this is reached.
constexpr std::uint32_t kMaxString = std::uint32_t{1} << 30;

class Writer {
 public:
  template <class I>
  void put(I v) {
    for (std::size_t i = 0; i < sizeof(I); ++i) {
      out_.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
    }
  }
  void put_string(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(std::span<const std::byte> in, std::string_view where, std::string_view what)
      : in_(in), where_(where), what_(what) {}
  template <class I>
  I get() {
    need(sizeof(I));
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(I); ++i) {
      v |= static_cast<std::uint64_t>(std::to_integer<std::uint8_t>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += sizeof(I);
    return static_cast<I>(v);
  }
  std::string get_string() {
    const auto n = get<std::uint32_t>();
    if (n > kMaxString) fail("a string of " + std::to_string(n) + " bytes");
    need(n);
    std::string s(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  void finish() {
    if (pos_ != in_.size()) fail(std::to_string(in_.size() - pos_) + " bytes after its end");
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw Error::corrupt_data(std::string(where_), "",
                              "malformed " + std::string(what_) + " message: " + why);
  }

 private:
  void need(std::size_t n) const {
    if (in_.size() - pos_ < n) {
      fail("it ends after " + std::to_string(in_.size()) + " bytes, " + std::to_string(n) +
           " more were needed at byte " + std::to_string(pos_));
    }
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
  std::string_view where_, what_;
};

int to_int(std::uint32_t v, const Reader& r, std::string_view what) {
  if (v > 1u << 30) r.fail(std::string(what) + " " + std::to_string(v) + " is out of range");
  return static_cast<int>(v);
}

}  // namespace

std::string_view type_name(Type t) noexcept {
  switch (t) {
    case Type::start:
      return "start";
    case Type::credit:
      return "credit";
    case Type::ping:
      return "ping";
    case Type::bye:
      return "bye";
    case Type::shared:
      return "shared";
    case Type::release:
      return "release";
    case Type::welcome:
      return "welcome";
    case Type::batch:
      return "batch";
    case Type::end:
      return "end";
    case Type::error:
      return "error";
    case Type::pong:
      return "pong";
    case Type::who:
      return "who";
  }
  return "unknown";
}

std::string encode_header(Type type, std::uint64_t generation, std::uint64_t seq,
                          std::uint8_t flags) {
  Writer w;
  for (char c : kMagic) w.put(static_cast<std::uint8_t>(c));
  w.put(kProtocolVersion);
  w.put(static_cast<std::uint8_t>(type));
  w.put(flags);
  w.put(generation);
  w.put(seq);
  return w.take();
}

Header decode_header(std::span<const std::byte> frame, std::string_view where) {
  Reader r(frame, where, "service");
  if (frame.size() != kHeaderSize) {
    r.fail("a header of " + std::to_string(frame.size()) + " bytes, not " +
           std::to_string(kHeaderSize));
  }
  if (std::memcmp(frame.data(), kMagic, sizeof kMagic) != 0) {
    r.fail("it does not start with \"WDSS\" (not a wds data service peer)");
  }
  r.get<std::uint32_t>();
  Header h;
  h.version = r.get<std::uint16_t>();
  const auto type = r.get<std::uint8_t>();
  h.flags = r.get<std::uint8_t>();
  h.generation = r.get<std::uint64_t>();
  h.seq = r.get<std::uint64_t>();
  const bool known = (type >= 1 && type <= 6) || (type >= 16 && type <= 21);
  // A peer of another version may have other types and flags; the caller reports the version.
  if (h.version == kProtocolVersion) {
    if (!known) r.fail("unknown type " + std::to_string(type));
    if ((h.flags & ~kShared) != 0 || (h.flags != 0 && type != static_cast<int>(Type::batch))) {
      r.fail("unknown flags " + std::to_string(h.flags) + " on a message of type " +
             std::to_string(type));
    }
  }
  h.type = static_cast<Type>(type);
  return h;
}

std::string encode(const Start& m) {
  Writer w;
  w.put(static_cast<std::uint32_t>(m.rank));
  w.put(static_cast<std::uint32_t>(m.world_size));
  w.put(m.credits);
  w.put(static_cast<std::uint8_t>((m.continuous ? 1 : 0) | (m.state ? 2 : 0)));
  w.put(m.epoch);
  w.put_string(m.token);
  w.put_string(m.state ? *m.state : std::string());
  return w.take();
}

Start decode_start(std::span<const std::byte> body, std::string_view where) {
  Reader r(body, where, "start");
  Start m;
  m.rank = to_int(r.get<std::uint32_t>(), r, "rank");
  m.world_size = to_int(r.get<std::uint32_t>(), r, "world size");
  m.credits = r.get<std::uint32_t>();
  const auto flags = r.get<std::uint8_t>();
  if (flags > 3) r.fail("unknown flags " + std::to_string(flags));
  m.continuous = flags & 1;
  m.epoch = r.get<std::uint64_t>();
  m.token = r.get_string();
  std::string state = r.get_string();
  if (flags & 2) m.state = std::move(state);
  r.finish();
  return m;
}

std::string encode(const Welcome& m) {
  Writer w;
  w.put(static_cast<std::uint32_t>(m.producer));
  w.put(static_cast<std::uint32_t>(m.producers));
  w.put(static_cast<std::uint8_t>(m.shared ? 1 : 0));
  if (m.shared) {
    w.put(static_cast<std::uint32_t>(m.shared->pid));
    w.put(static_cast<std::uint32_t>(m.shared->fd));
    for (std::byte b : m.shared->nonce) w.put(std::to_integer<std::uint8_t>(b));
  }
  return w.take();
}

Welcome decode_welcome(std::span<const std::byte> body, std::string_view where) {
  Reader r(body, where, "welcome");
  Welcome m;
  m.producer = to_int(r.get<std::uint32_t>(), r, "producer");
  m.producers = to_int(r.get<std::uint32_t>(), r, "producers");
  const auto has_offer = r.get<std::uint8_t>();
  if (has_offer > 1) r.fail("unknown shared-memory flag " + std::to_string(has_offer));
  if (has_offer) {
    SharedOffer o;
    o.pid = to_int(r.get<std::uint32_t>(), r, "pid");
    o.fd = to_int(r.get<std::uint32_t>(), r, "descriptor");
    for (std::byte& b : o.nonce) b = std::byte{r.get<std::uint8_t>()};
    m.shared = o;
  }
  r.finish();
  return m;
}

std::string encode(const ErrorReply& m) {
  Writer w;
  w.put(static_cast<std::uint8_t>(m.code));
  w.put_string(m.url);
  w.put_string(m.member);
  w.put_string(m.cause);
  return w.take();
}

ErrorReply decode_error(std::span<const std::byte> body, std::string_view where) {
  Reader r(body, where, "error");
  ErrorReply m;
  const auto code = r.get<std::uint8_t>();
  if (code > static_cast<std::uint8_t>(ErrorCode::permission_denied)) {
    r.fail("unknown error code " + std::to_string(code));
  }
  m.code = static_cast<ErrorCode>(code);
  m.url = r.get_string();
  m.member = r.get_string();
  m.cause = r.get_string();
  r.finish();
  return m;
}

namespace {
// A credit's body and a batch's tag frame are the same: one u64, the tag.
std::uint64_t decode_u64(std::span<const std::byte> body, std::string_view where,
                         std::string_view what) {
  Reader r(body, where, what);
  const auto tag = r.get<std::uint64_t>();
  r.finish();
  return tag;
}
}  // namespace

std::string encode_credit(std::uint64_t tag) {
  Writer w;
  w.put(tag);
  return w.take();
}

std::uint64_t decode_credit(std::span<const std::byte> body, std::string_view where) {
  return decode_u64(body, where, "credit");
}

std::string encode_tag(std::uint64_t tag) {
  return encode_credit(tag);
}

std::uint64_t decode_tag(std::span<const std::byte> frame, std::string_view where) {
  return decode_u64(frame, where, "batch tag");
}

std::string encode(const SharedTable& m) {
  Writer w;
  w.put(static_cast<std::uint32_t>(m.frames.size()));
  for (const SharedFrame& f : m.frames) {
    w.put(f.frame);
    w.put(f.serial);
    w.put(static_cast<std::uint32_t>(f.fd));
    w.put(f.block_bytes);
    w.put(f.offset);
    w.put(f.length);
  }
  w.put(static_cast<std::uint32_t>(m.retired.size()));
  for (std::uint64_t s : m.retired) w.put(s);
  return w.take();
}

SharedTable decode_shared_table(std::span<const std::byte> body, std::string_view where) {
  Reader r(body, where, "shared-memory table of a batch");
  SharedTable m;
  // Each entry takes 40 bytes: a count beyond what the body holds is refused before any
  // allocation.
  const auto n = r.get<std::uint32_t>();
  if (n > body.size() / 40)
    r.fail(std::to_string(n) + " frames in " + std::to_string(body.size()) + " bytes");
  m.frames.resize(n);
  for (SharedFrame& f : m.frames) {
    f.frame = r.get<std::uint32_t>();
    f.serial = r.get<std::uint64_t>();
    f.fd = to_int(r.get<std::uint32_t>(), r, "descriptor");
    f.block_bytes = r.get<std::uint64_t>();
    f.offset = r.get<std::uint64_t>();
    f.length = r.get<std::uint64_t>();
    if (f.frame == 0) r.fail("the description frame is never shared");
    if (f.offset > f.block_bytes || f.length > f.block_bytes - f.offset) {
      r.fail("bytes [" + std::to_string(f.offset) + ", +" + std::to_string(f.length) +
             ") are outside the block of " + std::to_string(f.block_bytes) + " bytes");
    }
  }
  const auto k = r.get<std::uint32_t>();
  if (k > body.size() / 8)
    r.fail(std::to_string(k) + " freed blocks in " + std::to_string(body.size()) + " bytes");
  m.retired.resize(k);
  for (std::uint64_t& s : m.retired) s = r.get<std::uint64_t>();
  r.finish();
  return m;
}

std::string encode_release(std::span<const std::uint64_t> serials) {
  Writer w;
  w.put(static_cast<std::uint32_t>(serials.size()));
  for (std::uint64_t s : serials) w.put(s);
  return w.take();
}

std::vector<std::uint64_t> decode_release(std::span<const std::byte> body, std::string_view where) {
  Reader r(body, where, "release");
  const auto n = r.get<std::uint32_t>();
  if (n > body.size() / 8)
    r.fail(std::to_string(n) + " blocks in " + std::to_string(body.size()) + " bytes");
  std::vector<std::uint64_t> serials(n);
  for (std::uint64_t& s : serials) s = r.get<std::uint64_t>();
  r.finish();
  return serials;
}

}  // namespace wds::protocol
