// wds ls URL-PATTERN...: stream shards in order, one line per sample.
#include <openssl/evp.h>

#include <cctype>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/commands.hpp"
#include "tools/pipeline_options.hpp"
#include "tools/service_options.hpp"
#include "wds/error.hpp"
#include "wds/loader.hpp"
#include "wds/sink.hpp"
#include "wds/source.hpp"
#include "wds/streams.hpp"
#if WDS_TOOL_SERVICE
#include "wds/service.hpp"
#endif

namespace wds::tool {
namespace {

struct LsOptions {
  PipelineOptions pipeline;
  TrainerOptions trainer;
  bool json = false;
  bool sha256 = false;
  int workers = 0;  // > 0: through a Loader of this many workers (ordered)
  std::optional<std::uint64_t> stop_after;
  std::string save_state;
  std::string restore;
};

std::string sha256_hex(std::span<const std::byte> data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw Error::unavailable("OpenSSL SHA-256 failed");
  }
  static const char* hex = "0123456789abcdef";
  std::string out(2 * len, '0');
  for (unsigned int i = 0; i < len; ++i) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 15];
  }
  return out;
}

void write_line(std::string& line) {
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stdout);
}

void flush_output() {
  if (std::fflush(stdout) != 0) throw Error::unavailable("-", "", "cannot write output");
}

#if WDS_TOOL_SERVICE
// A batch's keys or URLs: its list of strings, or an unbatched item's one string.
std::vector<std::string> strings_of(const DecodedSample& item, std::string_view name) {
  std::vector<std::string> out;
  const Value* v = item.find(name);
  if (!v) return out;
  if (const std::string* s = v->get_if<std::string>()) {
    out.push_back(*s);
  } else if (const Tuple* list = v->get_if<Tuple>()) {
    for (const Value& x : *list) {
      const std::string* s = x.get_if<std::string>();
      out.push_back(s ? *s : std::string());
    }
  }
  return out;
}

// One line per sample of each batch received: URL and key, from the batch's __url__ and
// __key__ (what wds serve sends with every batch).
void run_ls_service(const LsOptions& o) {
  ServiceLoader<DecodedSample> loader(trainer_options(o.pipeline, o.trainer));
  if (o.pipeline.epoch) loader.with_epoch(*o.pipeline.epoch);
  std::string line;
  for (std::uint64_t pass = 0; pass < o.pipeline.passes; ++pass) {
    for (DecodedSample& item : loader) {
      const std::vector<std::string> keys = strings_of(item, "__key__");
      std::vector<std::string> urls = strings_of(item, "__url__");
      if (keys.empty()) {
        throw Error::invalid_argument(
            o.trainer.service, "",
            "a batch without __key__: the producer does not send its samples' keys "
            "(wds serve does; a program's Server needs a \"__key__\" field)");
      }
      urls.resize(keys.size());  // a producer that sends no URLs: empty ones
      for (std::size_t i = 0; i < keys.size(); ++i) {
        if (o.json) {
          nlohmann::ordered_json j;
          j["__key__"] = keys[i];
          j["__url__"] = urls[i];
          line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        } else {
          line = urls[i] + '\t' + keys[i];
        }
        write_line(line);
      }
    }
  }
  flush_output();
}
#endif

// A state file, from any URL a shard can come from.
std::string read_state_file(const std::string& path) {
  std::unique_ptr<ByteSource> source = open_url(path);
  std::string out;
  for (auto chunk = source->read(); !chunk.empty(); chunk = source->read()) {
    out.append(reinterpret_cast<const char*>(chunk.data()), chunk.size());
  }
  return out;
}

// Through a sink, which writes beside and renames over: a crash never leaves half a checkpoint
// (and the state may go to any URL a shard can: s3://, ...).
void write_state_file(const std::string& path, const std::string& state) {
  std::unique_ptr<ByteSink> sink = open_sink(path);
  sink->write(std::as_bytes(std::span(state)));
  sink->close();
}

// Restores `target` (a Pipeline or a Loader) from the state file at `path`: an error about the
// state (damaged, malformed, of another configuration) names the file.
template <class Target>
void restore_from_file(Target& target, const std::string& path) {
  const std::string state = read_state_file(path);
  try {
    target.restore(state);
  } catch (const Error& e) {
    if (!e.url().empty()) throw;  // about a shard the state names
    throw Error(e.code(), path, e.member(), e.cause());
  }
}

std::string sample_line(const Sample& sample, const LsOptions& o) {
  const Sample* s = &sample;
  std::string line;
  if (o.json) {
    nlohmann::ordered_json j;
    j["__key__"] = s->key();
    j["__url__"] = s->url();
    for (const Field& f : s->fields()) {
      if (o.sha256) {
        j[f.ext] = sha256_hex(f.data.span());
      } else {
        j[f.ext] = f.data.size();
      }
    }
    // Keys and names are bytes from the archive: replace invalid UTF-8 rather than fail.
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = s->url() + '\t' + s->key();
    for (const Field& f : s->fields()) {
      line += '\t' + f.ext + '=' +
              (o.sha256 ? sha256_hex(f.data.span()) : std::to_string(f.data.size()));
    }
  }
  return line;
}

// Prints the passes of `items` (a Pipeline or a Loader), stopping after --stop-after samples,
// then writes --save-state.
template <class Source>
void print_passes(Source& items, const LsOptions& o) {
  std::string line;
  std::uint64_t printed = 0;
  bool stopped = false;
  for (std::uint64_t pass = 0; pass < o.pipeline.passes && !stopped; ++pass) {
    if (o.stop_after && printed >= *o.stop_after) break;
    for (Sample& sample : items) {
      line = sample_line(sample, o);
      write_line(line);
      if (o.stop_after && ++printed >= *o.stop_after) {
        stopped = true;
        break;
      }
    }
  }
  flush_output();
  if (!o.save_state.empty()) write_state_file(o.save_state, items.state());
}

void run_ls(const CLI::App& cmd, const LsOptions& o) {
  check_trainer_use(cmd, o.pipeline, o.trainer, {"--json"});
  if (!o.trainer.service.empty()) {
#if WDS_TOOL_SERVICE
    run_ls_service(o);
    return;
#else
    throw Error::invalid_argument(
        "--service: this wds was built without the data service (WDS_BUILD_SERVICE=OFF)");
#endif
  }
  if (o.workers > 0 && o.pipeline.num_workers != 1) {
    throw Error::invalid_argument(
        "--workers runs a loader of that many workers: leave --worker/--num-workers out");
  }
  if (o.workers == 0) {
    Pipeline<Sample> samples = make_pipeline(o.pipeline);
    if (!o.restore.empty()) restore_from_file(samples, o.restore);
    print_passes(samples, o);
    return;
  }
  PipelineOptions po = o.pipeline;
  po.epoch.reset();  // the loader counts the epoch: samples of all its workers together
  LoaderOptions<Sample> lo;
  lo.workers = o.workers;
  lo.ordered = true;  // the same order on every run, as without workers
  lo.resumable = !o.save_state.empty() || !o.restore.empty();
  lo.epoch_length = o.pipeline.epoch;
  Loader<Sample> loader(make_pipeline(po), std::move(lo));
  if (!o.restore.empty()) restore_from_file(loader, o.restore);
  print_passes(loader, o);
}

}  // namespace

void add_ls(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "ls",
      "Stream shards in order and print one line per sample: URL, key, and each field's "
      "extension with its size in bytes (or SHA-256).");
  auto o = std::make_shared<LsOptions>();
  add_pipeline_options(*cmd, o->pipeline, false);
  add_trainer_options(*cmd, o->trainer);
  cmd->add_flag("--json", o->json,
                "one JSON object per line: {\"__key__\", \"__url__\", ext: size, ...}");
  cmd->add_flag("--sha256", o->sha256,
                "print each field's SHA-256 (lowercase hex) instead of its size");
  cmd->add_option("--workers", o->workers,
                  "read with a loader of N worker threads, handing samples out in order "
                  "(--epoch then counts the loader's samples)")
      ->check(at_least<int>(0));
  cmd->add_option("--stop-after", o->stop_after, "print N samples, then stop (and --save-state)")
      ->check(at_least<std::uint64_t>(0));
  cmd->add_option("--save-state", o->save_state,
                  "write where the pipeline is to FILE when it stops (at --stop-after or the end)");
  cmd->add_option("--restore", o->restore,
                  "continue from a state FILE (--save-state's, or wds merge-states' for "
                  "another number of ranks or workers with --streams)");

  cmd->footer(
      "Examples:\n  wds ls /data/train-{000000..000009}.tar\n"
      "  wds ls --json --sha256 shard.tar\n"
      "  wds ls --rank 1 --world-size 4 'train-{000..099}.tar'   # the shards rank 1 reads\n"
      "  wds ls --resampled --epoch 100 --passes 3 --shuffle 1000 'train-{000..099}.tar'\n"
      "  wds ls --streams 24 --shuffle 100 --epoch 50 --rank 0 --world-size 4 --workers 2 \\\n"
      "      --stop-after 20 --save-state r0.state 'train-{000..099}.tar'   # and ranks 1-3\n"
      "  wds merge-states all.state r0.state r1.state r2.state r3.state\n"
      "  wds ls --streams 24 --shuffle 100 --epoch 50 --rank 0 --world-size 2 --restore "
      "all.state 'train-{000..099}.tar'\n"
      "  wds ls --service tcp://127.0.0.1:5555 --rank 0 --world-size 2 --epoch 10   # from wds "
      "serve\n"
      "  mpirun -np 1 wds serve --bind tcp://127.0.0.1:5555 --exit-when-done --batch 8 "
      "'train-{000..099}.tar' \\\n"
      "      : -np 2 wds ls --service tcp://127.0.0.1:5555 --epoch 10\n"
      "With --service, one line per sample received: URL and key (with --json, "
      "{\"__key__\", \"__url__\"});\n--epoch N is then batches per rank per pass.");
  cmd->callback([cmd, o] { run_ls(*cmd, *o); });
}

namespace {

struct MergeOptions {
  std::string out;
  std::vector<std::string> in;
};

void run_merge_states(const MergeOptions& o) {
  std::vector<std::string> states;
  for (const std::string& path : o.in) states.push_back(read_state_file(path));
  std::string merged;
  try {
    merged = merge_states(states);
  } catch (const Error& e) {
    // merge_states names its inputs "state N" (from 1): name the file instead.
    const std::string& cause = e.cause();
    std::size_t digits = 0;
    while (6 + digits < cause.size() &&
           std::isdigit(static_cast<unsigned char>(cause[6 + digits]))) {
      ++digits;
    }
    if (!e.url().empty() || cause.rfind("state ", 0) != 0 || digits == 0) throw;
    const std::size_t n = std::stoul(cause.substr(6, digits));
    if (n == 0 || n > o.in.size()) throw;
    const std::size_t end = 6 + digits;
    throw Error(
        e.code(), o.in[n - 1], e.member(),
        cause.compare(end, 2, ": ") == 0 ? cause.substr(end + 2) : "the state" + cause.substr(end));
  }
  write_state_file(o.out, merged);
  const StreamsStateSummary s = summarize_streams_state(merged);
  if (s.count == 0) {
    std::fprintf(stderr, "wds: %s: a state between passes (no stream in progress)\n",
                 o.out.c_str());
    return;
  }
  std::fprintf(
      stderr, "wds: %s: %zu of %llu streams, epoch %llu, %llu items per rank in the pass\n",
      o.out.c_str(), s.streams.size(), static_cast<unsigned long long>(s.count),
      static_cast<unsigned long long>(s.epoch), static_cast<unsigned long long>(s.items_in_pass));
  if (s.streams.size() < s.count) {
    std::vector<std::uint64_t> missing;
    std::size_t k = 0;
    for (std::uint64_t c = 0; c < s.count; ++c) {
      if (k < s.streams.size() && s.streams[k] == c) {
        ++k;
      } else {
        missing.push_back(c);
      }
    }
    std::string list;
    for (std::size_t i = 0; i < missing.size() && i < 16; ++i) {
      list += (i ? ", " : "") + std::to_string(missing[i]);
    }
    if (missing.size() > 16) list += ", ...";
    std::fprintf(stderr,
                 "wds: warning: streams %s are missing: a job restores from this state only "
                 "once every rank's state is merged in\n",
                 list.c_str());
  }
}

}  // namespace

void add_merge_states(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "merge-states",
      "Put the states of a job's ranks (wds ls --save-state, Pipeline::state(), Loader::state() "
      "with --streams / canonical streams) together into one, which a job of any number of "
      "ranks and workers dividing the stream count restores from.");
  auto o = std::make_shared<MergeOptions>();
  cmd->add_option("OUT", o->out, "the merged state file to write")->required();
  cmd->add_option("IN", o->in, "the ranks' state files")->required();
  cmd->footer(
      "Example (4 ranks stop, 2 continue):\n"
      "  wds merge-states all.state r0.state r1.state r2.state r3.state\n"
      "  wds ls --streams 24 --rank 0 --world-size 2 --restore all.state 'train-{000..099}.tar'");
  cmd->callback([o] { run_merge_states(*o); });
}

}  // namespace wds::tool
