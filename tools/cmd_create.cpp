// wds create OUTPUT-PATTERN: shards from a directory tree or an ImageNet-style list file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/cli_checks.hpp"
#include "tools/dataset_tools.hpp"
#include "tools/progress.hpp"
#include "wds/error.hpp"
#include "wds/random.hpp"
#include "wds/tar_samples.hpp"
#include "wds/tar_writer.hpp"

namespace wds::tool {
namespace {

namespace fs = std::filesystem;

struct CreateOptions {
  std::string pattern;
  std::string from_dir;
  std::string from_list;
  std::uint64_t maxcount = ShardWriterOptions{}.max_count;
  std::uint64_t maxsize = ShardWriterOptions{}.max_size;
  std::optional<std::uint64_t> shuffle;
  bool follow_symlinks = false;
};

// A field of a planned sample: a file's bytes, or a text (the label). Files are read only when
// their sample is written, so memory holds one sample whatever the dataset's size.
struct PlannedField {
  std::string ext;
  std::string path;  // empty for a text field
  std::string text;
};

struct PlannedSample {
  std::string key;
  std::vector<PlannedField> fields;
};

std::string lowercase(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}

Error errno_error(int err, const std::string& path, const std::string& what) {
  ErrorCode code = err == ENOENT || err == ENOTDIR ? ErrorCode::not_found
                   : err == EACCES || err == EPERM ? ErrorCode::permission_denied
                                                   : ErrorCode::unavailable;
  return Error(code, path, "", what + ": " + std::strerror(err));
}

// The whole file, read into one buffer of its size.
Bytes read_whole_file(const std::string& path) {
  // O_NONBLOCK: a file swapped for a FIFO since it was listed is refused below, not waited on.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw errno_error(errno, path, "cannot open source file");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw errno_error(errno, path, "cannot stat source file");
  if (!S_ISREG(st.st_mode)) {
    throw Error::invalid_argument(path, "", "source is not a regular file");
  }
  Bytes data(static_cast<std::size_t>(st.st_size));
  std::size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw errno_error(errno, path, "cannot read source file");
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  std::byte extra;
  ssize_t more = ::read(fd, &extra, 1);
  if (got != data.size() || more > 0) {
    // A shard must hold what the file holds at one moment; a file that is being written is not.
    throw Error::unavailable(path, "", "source file changed size while being read");
  }
  return data;
}

// Why TarWriter would refuse this key, or empty if it writes it (see TarWriter::write).
std::string key_problem(std::string_view key) {
  if (key.empty()) return "its key is empty";
  if (key.back() == '/') {
    return "a file name starting with '.' gives the key '" + std::string(key) +
           "', which ends with '/' and cannot be written";
  }
  return {};
}

// Entries --from-dir leaves out, each reported on stderr as it is found and counted for the
// summary at the end.
struct Skips {
  std::uint64_t count = 0;
  void add(const std::string& name, const std::string& why) {
    std::fprintf(stderr, "wds: warning: skipped '%s': %s\n", name.c_str(), why.c_str());
    ++count;
  }
};

// True if `p` is `root` or below it (both canonical).
bool is_within(const fs::path& p, const fs::path& root) {
  return std::mismatch(root.begin(), root.end(), p.begin(), p.end()).first == root.end();
}

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// A regular file found under --from-dir: its name relative to DIR, and the file read for it (a
// symbolic link's target, resolved now, so that a link changed later cannot redirect the read).
struct FoundFile {
  std::string name;
  std::string path;
};

// Walks DIR for create --from-dir. A symbolic link is followed only if it resolves inside DIR,
// unless `follow_out` says anywhere; a link to a directory is descended once per path, and one
// that leads back to a directory being walked (a cycle) is skipped.
class DirWalk {
 public:
  DirWalk(const std::string& dir, bool follow_out, Skips& skips)
      : dir_(dir), follow_out_(follow_out), skips_(skips) {
    std::error_code ec;
    root_ = fs::canonical(dir_, ec);
    if (ec) throw errno_error(ec.value(), dir_, "cannot resolve directory");
  }

  std::vector<FoundFile> run() {
    struct stat st {};
    if (::stat(dir_.c_str(), &st) != 0) throw errno_error(errno, dir_, "cannot stat directory");
    walk(fs::path(dir_), "", st);
    return std::move(found_);
  }

 private:
  void walk(const fs::path& path, const std::string& prefix, const struct stat& st) {
    open_dirs_.push_back({st.st_dev, st.st_ino});
    std::error_code ec;
    fs::directory_iterator it(path, ec), end;
    if (ec) throw errno_error(ec.value(), path.string(), "cannot list directory");
    std::vector<fs::path> entries;
    for (; it != end; it.increment(ec)) entries.push_back(it->path());
    if (ec) throw errno_error(ec.value(), path.string(), "cannot list directory");
    std::sort(entries.begin(), entries.end());  // skips are reported in a stable order
    for (const fs::path& entry : entries) visit(entry, prefix + entry.filename().string());
    open_dirs_.pop_back();
  }

  void visit(const fs::path& entry, const std::string& name) {
    struct stat st {};
    if (::lstat(entry.c_str(), &st) != 0) throw errno_error(errno, entry.string(), "cannot stat");
    std::string read_path = entry.string();
    if (S_ISLNK(st.st_mode)) {
      std::error_code ec;
      fs::path target = fs::canonical(entry, ec);
      if (ec) {
        // ENOENT: the target is missing; ELOOP: links that lead to each other.
        skips_.add(name, "symbolic link that does not resolve (" + ec.message() + ")");
        return;
      }
      if (!follow_out_ && !is_within(target, root_)) {
        skips_.add(name, "symbolic link to '" + target.string() +
                             "', outside the directory (--follow-symlinks packs it)");
        return;
      }
      if (::stat(target.c_str(), &st) != 0) {
        skips_.add(name, "symbolic link whose target cannot be read (" +
                             std::string(std::strerror(errno)) + ")");
        return;
      }
      read_path = target.string();
    }
    if (S_ISDIR(st.st_mode)) {
      for (const auto& [dev, ino] : open_dirs_) {
        if (dev == st.st_dev && ino == st.st_ino) {
          skips_.add(name, "symbolic link to a directory it is in (a cycle)");
          return;
        }
      }
      walk(entry, name + "/", st);
    } else if (S_ISREG(st.st_mode)) {
      found_.push_back({name, read_path});
    } else {
      skips_.add(name, kind_of(st.st_mode));
    }
  }

  std::string dir_;
  fs::path root_;  // DIR, canonical
  bool follow_out_;
  Skips& skips_;
  std::vector<std::pair<dev_t, ino_t>> open_dirs_;  // the directories being walked, outermost first
  std::vector<FoundFile> found_;
};

// Every regular file under `dir`, grouped by WebDataset's key/extension split of its path
// relative to `dir`. Samples come out in key order.
std::vector<PlannedSample> plan_from_dir(const std::string& dir, bool follow_symlinks,
                                         Skips& skips) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw Error(fs::exists(dir, ec) ? ErrorCode::invalid_argument : ErrorCode::not_found, dir, "",
                "--from-dir needs a directory");
  }
  std::vector<FoundFile> files = DirWalk(dir, follow_symlinks, skips).run();
  std::sort(files.begin(), files.end(),
            [](const FoundFile& a, const FoundFile& b) { return a.name < b.name; });

  std::map<std::string, PlannedSample> samples;
  std::map<std::string, std::string> field_names;  // "key\0ext" -> the name that gave it
  for (const FoundFile& file : files) {
    const std::string& name = file.name;
    std::optional<KeyExt> parts = split_member_name(name);
    if (!parts) {
      skips.add(name, "no key/extension split (a file name needs a '.' after its first character)");
      continue;
    }
    if (is_meta_member(name)) {
      skips.add(name, "WebDataset readers skip '__x__' names as metadata");
      continue;
    }
    std::string key(parts->key);
    if (std::string why = key_problem(key); !why.empty()) {
      skips.add(name, why);
      continue;
    }
    PlannedSample& s = samples[key];
    s.key = key;
    std::string ext = lowercase(std::string(parts->ext));
    auto [seen, fresh] = field_names.try_emplace(key + '\0' + ext, name);
    if (!fresh) {
      // Both cannot be fields of one sample, and neither is the obvious one to drop.
      throw Error::invalid_argument(
          (fs::path(dir) / name).string(), "",
          "same key and extension (after lowercasing) as '" + seen->second + "'");
    }
    s.fields.push_back({ext, file.path, {}});
  }
  std::vector<PlannedSample> out;
  out.reserve(samples.size());
  for (auto& [key, s] : samples) out.push_back(std::move(s));
  return out;
}

std::string trim(std::string_view s) {
  const char* ws = " \t\r";
  std::size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

// One sample per non-blank line "PATH<TAB>LABEL", keyed by the line's index.
std::vector<PlannedSample> plan_from_list(const std::string& list) {
  Bytes bytes = read_whole_file(list);
  std::string_view text = bytes.str();
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  // Zero-padded to one width, so keys sort as the lines do.
  const std::size_t width =
      std::max<std::size_t>(8, std::to_string(lines.empty() ? 0 : lines.size() - 1).size());
  const fs::path base = fs::path(list).parent_path();

  std::vector<PlannedSample> out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty()) continue;
    auto bad = [&](const std::string& why) {
      return Error::invalid_argument(list, "", "line " + std::to_string(i + 1) + ": " + why);
    };
    // A TAB separates path and label; without one, the last space does (Caffe's lists).
    // A line with a path alone gives a sample without "cls".
    const std::string body = trim(line);
    std::size_t sep = body.find('\t');
    if (sep == std::string::npos) sep = body.rfind(' ');
    std::string path = trim(std::string_view(body).substr(0, sep));
    std::string label = sep == std::string::npos ? std::string() : trim(body.substr(sep + 1));
    if (path.empty()) throw bad("no path");
    fs::path file = fs::path(path).is_absolute() || base.empty() ? fs::path(path) : base / path;
    std::string ext = lowercase(fs::path(path).extension().string());
    if (ext.size() < 2) throw bad("'" + path + "' has no extension to name its field");
    ext.erase(0, 1);
    if (ext == "cls") throw bad("'" + path + "': extension 'cls' is taken by the label");
    // Check every file before writing anything, so a bad list leaves no shards behind.
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
      throw errno_error(errno, file.string(), "line " + std::to_string(i + 1) + " of " + list);
    }
    if (!S_ISREG(st.st_mode)) {
      throw Error::invalid_argument(
          file.string(), "",
          "line " + std::to_string(i + 1) + " of " + list + ": not a regular file");
    }
    std::string key = std::to_string(i);
    key.insert(0, width - key.size(), '0');
    PlannedSample s{key, {{ext, file.string(), {}}}};
    if (!label.empty()) s.fields.push_back({"cls", {}, label});
    out.push_back(std::move(s));
  }
  return out;
}

void run_create(const CreateOptions& o) {
  ShardWriterOptions wo;
  wo.max_count = o.maxcount;
  wo.max_size = o.maxsize;
  wo.tar.mtime = 0;                   // the same inputs give the same bytes
  ShardWriter writer(o.pattern, wo);  // checks the pattern before any work

  Skips skips;
  std::vector<PlannedSample> plan = o.from_dir.empty()
                                        ? plan_from_list(o.from_list)
                                        : plan_from_dir(o.from_dir, o.follow_symlinks, skips);
  if (plan.empty()) {
    throw Error::invalid_argument(o.from_dir.empty() ? o.from_list : o.from_dir, "",
                                  "no samples to write");
  }
  if (o.shuffle) {
    Rng rng(derive_seed(*o.shuffle, {0}));
    rng.shuffle(plan.begin(), plan.end());
  }

  make_output_directory(o.pattern);
  std::vector<ShardCount> shards;
  Progress progress("create", "samples", plan.size());
  for (const PlannedSample& p : plan) {
    Sample s(p.key);
    for (const PlannedField& f : p.fields) {
      s.add(f.ext, f.path.empty() ? Bytes::copy_of(f.text) : read_whole_file(f.path));
    }
    write_counted(writer, s, shards, progress);
  }
  writer.close();
  progress.done();
  print_shard_counts(shards);
  if (skips.count > 0) {
    // After the totals, so that a long run's skips are not lost above its output.
    std::fprintf(stderr, "wds: warning: %llu entries under '%s' skipped (listed above)\n",
                 static_cast<unsigned long long>(skips.count), o.from_dir.c_str());
  }
}

}  // namespace

void add_create(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "create",
      "Write shards from a directory tree or from a list of files with labels, numbered by "
      "OUTPUT-PATTERN.");
  auto o = std::make_shared<CreateOptions>();
  cmd->add_option("OUTPUT-PATTERN", o->pattern,
                  "shard file names with one integer conversion, e.g. out/train-%06d.tar")
      ->required();
  auto* dir = cmd->add_option(
      "--from-dir", o->from_dir,
      "every regular file under DIR (recursively, sorted by path) becomes a member named by its "
      "path relative to DIR; files with the same key (the path up to the first '.' of the file "
      "name, as WebDataset splits names) form one sample, the rest of the name, lowercased, is "
      "the field. Symbolic links are followed when they resolve inside DIR. Reported on stderr "
      "and skipped, with a count at the end: names without such a split, links that dangle, "
      "loop or lead out of DIR, FIFOs, sockets and devices");
  auto* list = cmd->add_option(
      "--from-list", o->from_list,
      "a file of lines 'PATH<TAB>LABEL' (ImageNet style; without a TAB the last space separates, "
      "without either the line is a path alone and gets no label; "
      "relative paths are relative to the list's directory): each line becomes one sample keyed "
      "by its line index from 0, zero-padded ('00000042'), because base names collide across "
      "class folders; the file's extension (lowercased) holds its bytes and 'cls' the label as "
      "text");
  dir->type_name("DIR");
  list->type_name("FILE");
  cmd->add_flag("--follow-symlinks", o->follow_symlinks,
                "with --from-dir: also follow symbolic links that lead out of DIR (packing what "
                "they point to)")
      ->needs(dir);
  dir->excludes(list);
  list->excludes(dir);
  cmd->add_option("--maxcount", o->maxcount, "at most N samples per shard")
      ->check(at_least<std::uint64_t>(1))
      ->capture_default_str();
  cmd->add_option("--maxsize", o->maxsize,
                  "at most BYTES of payload per shard (suffixes k, M, G... in powers of 1000, "
                  "e.g. 1G); a bigger sample gets a shard of its own")
      ->transform(CLI::AsSizeValue(true))
      ->transform(at_least<std::uint64_t>(1))  // a transform runs first: on the text as typed
      ->capture_default_str();
  cmd->add_option("--shuffle", o->shuffle,
                  "permute the samples with this seed before writing (the same seed, the same "
                  "order)")
      ->check(at_least<std::uint64_t>(0));
  cmd->footer(
      "Members get modification time 0, so the same inputs give byte-identical shards. Prints "
      "each shard\nwritten with its samples and payload bytes, then the totals.\n\n"
      "Examples:\n"
      "  wds create 'out/train-%06d.tar' --from-dir images/ --maxcount 10000\n"
      "  wds create 'out/train-%06d.tar' --from-list train.txt --maxsize 1G --shuffle 7");
  cmd->callback([o] {
    if (o->from_dir.empty() && o->from_list.empty()) {
      throw CLI::RequiredError("--from-dir or --from-list");
    }
    run_create(*o);
  });
}

}  // namespace wds::tool
