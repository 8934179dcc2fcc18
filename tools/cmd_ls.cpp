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
#include "wds/webdataset.hpp"

namespace wds::tool {
namespace {

struct LsOptions {
  std::vector<std::string> patterns;
  bool json = false;
  bool sha256 = false;
  std::optional<int> rank;
  std::optional<int> world_size;
  int worker = 0;
  int num_workers = 1;
  std::optional<std::uint64_t> seed;
  bool shuffle_shards = false;
  std::size_t shard_shuffle = 0;
  std::size_t shuffle = 0;
  bool resampled = false;
  std::optional<std::uint64_t> epoch;
  std::uint64_t passes = 1;
  std::string split_policy;
  bool allow_empty = false;
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
  WebDatasetOptions options;
  options.seed = o.seed;
  options.distributed.rank = o.rank;  // unset: from the launcher's environment
  options.distributed.world_size = o.world_size;
  if (!o.split_policy.empty()) options.split_policy = parse_split_policy(o.split_policy);
  options.allow_empty = o.allow_empty;
  options.shuffle_shards = o.shuffle_shards;
  options.shard_shuffle = o.shard_shuffle;
  options.resampled = o.resampled;
  options.handler = handler_named(o.on_error);
  Pipeline<Sample> samples =
      WebDataset(std::move(urls), options).with_worker(o.worker, o.num_workers);
  if (o.shuffle > 0) samples = samples.shuffle(o.shuffle);
  if (o.epoch) samples = samples.with_epoch(*o.epoch);

  std::string line;
  for (std::uint64_t pass = 0; pass < o.passes; ++pass) {
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
  cmd->add_option("URL-PATTERN", o->patterns, "shard URL patterns, read in order")->required();
  cmd->add_flag("--json", o->json,
                "one JSON object per line: {\"__key__\", \"__url__\", ext: size, ...}");
  cmd->add_flag("--sha256", o->sha256,
                "print each field's SHA-256 (lowercase hex) instead of its size");
  cmd->add_option("--rank", o->rank,
                  "this rank (with --world-size; default: from RANK/WORLD_SIZE, Open MPI, PMI, "
                  "SLURM or Paddle variables)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--world-size", o->world_size, "number of ranks")->check(CLI::PositiveNumber);
  cmd->add_option("--worker", o->worker, "this worker of the rank")->check(CLI::NonNegativeNumber);
  cmd->add_option("--num-workers", o->num_workers, "workers per rank")->check(CLI::PositiveNumber);
  cmd->add_option("--split-policy", o->split_policy,
                  "when shards do not divide among ranks: even (refuse), unbalanced, drop_last, "
                  "replicate, split_samples (default: WDS_SPLIT_POLICY, else even)");
  cmd->add_flag("--allow-empty", o->allow_empty, "a rank or worker may get no shard");
  cmd->add_option("--seed", o->seed, "seed of every shuffle (default: WDS_SEED, else 0)");
  cmd->add_flag("--shuffle-shards", o->shuffle_shards,
                "permute all shards with (seed, epoch) before the split: ranks never overlap");
  cmd->add_option("--shard-shuffle", o->shard_shuffle,
                  "a shuffle buffer of N over this worker's shard URLs");
  cmd->add_option("--shuffle", o->shuffle, "a shuffle buffer of N samples");
  cmd->add_flag("--resampled", o->resampled,
                "draw shards with replacement, forever (use with --epoch)");
  cmd->add_option("--epoch", o->epoch,
                  "exactly N samples per pass, continuing the stream across passes");
  cmd->add_option("--passes", o->passes, "number of passes (epochs) to print")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--on-error", o->on_error,
                  "a shard that fails: raise (stop with an error), warn (report and go on to the "
                  "next shard), ignore (go on silently)")
      ->check(CLI::IsMember({"raise", "warn", "ignore"}))
      ->capture_default_str();
  cmd->footer(
      "Examples:\n  wds ls /data/train-{000000..000009}.tar\n"
      "  wds ls --json --sha256 shard.tar\n"
      "  wds ls --rank 1 --world-size 4 'train-{000..099}.tar'   # the shards rank 1 reads\n"
      "  wds ls --resampled --epoch 100 --passes 3 --shuffle 1000 'train-{000..099}.tar'");
  cmd->callback([o] { run_ls(*o); });
}

}  // namespace wds::tool
