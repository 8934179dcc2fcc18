// wds ls URL-PATTERN...: stream shards in order, one line per sample.
#include <openssl/evp.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/commands.hpp"
#include "tools/pipeline_options.hpp"
#include "wds/error.hpp"

namespace wds::tool {
namespace {

struct LsOptions {
  PipelineOptions pipeline;
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

void run_ls(const LsOptions& o) {
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
      line += '\n';
      std::fwrite(line.data(), 1, line.size(), stdout);
    }
  }
  if (std::fflush(stdout) != 0) throw Error(ErrorCode::unavailable, "-", "", "cannot write output");
}

}  // namespace

void add_ls(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "ls",
      "Stream shards in order and print one line per sample: URL, key, and each field's "
      "extension with its size in bytes (or SHA-256).");
  auto o = std::make_shared<LsOptions>();
  add_pipeline_options(*cmd, o->pipeline);
  cmd->add_flag("--json", o->json,
                "one JSON object per line: {\"__key__\", \"__url__\", ext: size, ...}");
  cmd->add_flag("--sha256", o->sha256,
                "print each field's SHA-256 (lowercase hex) instead of its size");

  cmd->footer(
      "Examples:\n  wds ls /data/train-{000000..000009}.tar\n"
      "  wds ls --json --sha256 shard.tar\n"
      "  wds ls --rank 1 --world-size 4 'train-{000..099}.tar'   # the shards rank 1 reads\n"
      "  wds ls --resampled --epoch 100 --passes 3 --shuffle 1000 'train-{000..099}.tar'");
  cmd->callback([o] { run_ls(*o); });
}

}  // namespace wds::tool
