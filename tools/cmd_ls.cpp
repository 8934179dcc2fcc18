// wds ls URL-PATTERN...: stream shards in order, one line per sample.
#include <openssl/evp.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/commands.hpp"
#include "tools/pipeline_options.hpp"
#include "tools/service_options.hpp"
#include "wds/error.hpp"
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
};

std::string sha256_hex(std::span<const std::byte> data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1) {
    throw Error(ErrorCode::unavailable, "", "", "OpenSSL SHA-256 failed");
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
  if (std::fflush(stdout) != 0) throw Error(ErrorCode::unavailable, "-", "", "cannot write output");
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
        throw Error(ErrorCode::invalid_argument, o.trainer.service, "",
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

void run_ls(const CLI::App& cmd, const LsOptions& o) {
  check_trainer_use(cmd, o.pipeline, o.trainer, {"--json"});
  if (!o.trainer.service.empty()) {
#if WDS_TOOL_SERVICE
    run_ls_service(o);
    return;
#else
    throw Error(ErrorCode::invalid_argument, "", "",
                "--service: this wds was built without the data service (WDS_BUILD_SERVICE=OFF)");
#endif
  }
  Pipeline<Sample> samples = make_pipeline(o.pipeline);

  std::string line;
  for (std::uint64_t pass = 0; pass < o.pipeline.passes; ++pass) {
    for (Sample& sample : samples) {
      const Sample* s = &sample;
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
      write_line(line);
    }
  }
  flush_output();
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

  cmd->footer(
      "Examples:\n  wds ls /data/train-{000000..000009}.tar\n"
      "  wds ls --json --sha256 shard.tar\n"
      "  wds ls --rank 1 --world-size 4 'train-{000..099}.tar'   # the shards rank 1 reads\n"
      "  wds ls --resampled --epoch 100 --passes 3 --shuffle 1000 'train-{000..099}.tar'\n"
      "  wds ls --service tcp://127.0.0.1:5555 --rank 0 --world-size 2 --epoch 10   # from wds "
      "serve\n"
      "  mpirun -np 1 wds serve --bind tcp://127.0.0.1:5555 --exit-when-done --batch 8 "
      "'train-{000..099}.tar' \\\n"
      "      : -np 2 wds ls --service tcp://127.0.0.1:5555 --epoch 10\n"
      "With --service, one line per sample received: URL and key (with --json, "
      "{\"__key__\", \"__url__\"});\n--epoch N is then batches per rank per pass.");
  cmd->callback([cmd, o] { run_ls(*cmd, *o); });
}

}  // namespace wds::tool
