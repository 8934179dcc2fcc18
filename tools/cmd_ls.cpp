// wds ls URL-PATTERN...: stream shards in order, one line per sample.
#include <openssl/evp.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tools/commands.hpp"
#include "wds/brace.hpp"
#include "wds/error.hpp"
#include "wds/split.hpp"
#include "wds/tar_samples.hpp"

namespace wds::tool {
namespace {

struct LsOptions {
  std::vector<std::string> patterns;
  bool json = false;
  bool sha256 = false;
  int rank = 0;
  int world_size = 1;
  int worker = 0;
  int num_workers = 1;
  std::string on_error = "raise";
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

ErrorHandler handler_named(const std::string& name) {
  if (name == "raise") return reraise_exception;
  if (name == "warn") return warn_and_continue;
  return ignore_and_continue;  // "ignore"; CLI11 checks the choice
}

void run_ls(const LsOptions& o) {
  std::vector<std::string> urls;
  for (const std::string& p : o.patterns) {
    std::vector<std::string> expanded = expand_urls(p);
    urls.insert(urls.end(), expanded.begin(), expanded.end());
  }
  urls = split_by_worker(split_by_node(urls, o.rank, o.world_size), o.worker, o.num_workers);

  TarSamplesOptions options;
  options.handler = handler_named(o.on_error);
  TarSamples samples(std::move(urls), options);
  std::string line;
  while (std::optional<Sample> s = samples.next()) {
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
  if (std::fflush(stdout) != 0) throw Error(ErrorCode::unavailable, "-", "", "cannot write output");
}

}  // namespace

void add_ls(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "ls",
      "Stream shards in order and print one line per sample: URL, key, and each field's "
      "extension with its size in bytes (or SHA-256).");
  auto o = std::make_shared<LsOptions>();
  cmd->add_option("URL-PATTERN", o->patterns, "shard URL patterns, read in order")->required();
  cmd->add_flag("--json", o->json,
                "one JSON object per line: {\"__key__\", \"__url__\", ext: size, ...}");
  cmd->add_flag("--sha256", o->sha256,
                "print each field's SHA-256 (lowercase hex) instead of its size");
  cmd->add_option("--rank", o->rank, "this node's rank: read shards urls[rank::world-size]")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--world-size", o->world_size, "number of nodes")->check(CLI::PositiveNumber);
  cmd->add_option("--worker", o->worker, "this worker: then read [worker::num-workers]")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--num-workers", o->num_workers, "workers per node")->check(CLI::PositiveNumber);
  cmd->add_option("--on-error", o->on_error,
                  "a shard that fails: raise (stop with an error), warn (report and go on to the "
                  "next shard), ignore (go on silently)")
      ->check(CLI::IsMember({"raise", "warn", "ignore"}))
      ->capture_default_str();
  cmd->footer(
      "Examples:\n  wds ls /data/train-{000000..000009}.tar\n"
      "  wds ls --json --sha256 shard.tar\n"
      "  wds ls --rank 1 --world-size 4 'train-{000..099}.tar'   # the shards rank 1 reads");
  cmd->callback([o] { run_ls(*o); });
}

}  // namespace wds::tool
