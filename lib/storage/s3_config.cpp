// S3 helpers: credentials and region from the environment and the AWS CLI's files
// (~/.aws/credentials, ~/.aws/config).
#include "lib/storage/s3.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "lib/storage/s3_detail.hpp"
#include "lib/text.hpp"
#include "wds/error.hpp"

namespace wds::s3 {

using detail::env;
namespace {

// ---- INI files (~/.aws/credentials, ~/.aws/config) --------------------------------------------

using IniSection = std::map<std::string, std::string>;
using Ini = std::map<std::string, IniSection>;

// The AWS CLI's INI dialect (Python's configparser): [section], "key = value" or "key: value",
// keys case-insensitive, '#' and ';' comment lines. An indented line after a key continues that
// key's value (nested settings like "s3 =\n  region = x"), so it is skipped rather than read as
// a key of the section. "[profile   x]" is stored as "profile x".
Ini parse_ini(std::string_view text) {
  Ini ini;
  IniSection* section = nullptr;
  bool after_key = false;
  while (!text.empty()) {
    std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    std::string_view t = trim(line);
    if (t.empty() || t.front() == '#' || t.front() == ';') continue;
    if (after_key && is_ascii_space(line.front())) continue;
    after_key = false;
    if (t.front() == '[') {
      section = nullptr;
      if (t.back() != ']') continue;  // malformed header: its keys belong to no section
      std::string_view name = trim(t.substr(1, t.size() - 2));
      if (name.starts_with("profile") && name.size() > 7 && is_ascii_space(name[7])) {
        section = &ini["profile " + std::string(trim(name.substr(7)))];
      } else {
        section = &ini[std::string(name)];
      }
      continue;
    }
    std::size_t sep = t.find_first_of("=:");
    if (!section || sep == std::string_view::npos) continue;
    (*section)[lowercase(trim(t.substr(0, sep)))] = std::string(trim(t.substr(sep + 1)));
    after_key = true;
  }
  return ini;
}

struct FileRead {
  enum { ok, missing, unreadable } state = missing;
  std::string text;
  std::string error;  // strerror when unreadable
};

FileRead read_file(const std::string& path) {
  FileRead r;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    r.state = errno == ENOENT || errno == ENOTDIR ? FileRead::missing : FileRead::unreadable;
    r.error = std::strerror(errno);
    return r;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) r.text.append(buf, n);
  if (std::ferror(f)) {
    r.state = FileRead::unreadable;
    r.error = std::strerror(errno);
  } else {
    r.state = FileRead::ok;
  }
  std::fclose(f);
  return r;
}

// The file named by `var`, else $HOME/<home_relative>; nullopt when neither is set.
std::optional<std::string> aws_file(const char* var, const char* home_relative) {
  if (auto p = env(var)) return p;
  if (auto home = env("HOME")) return *home + "/" + home_relative;
  return std::nullopt;
}

const IniSection* find_section(const Ini& ini, const std::string& name) {
  auto it = ini.find(name);
  return it == ini.end() ? nullptr : &it->second;
}

std::string get(const IniSection& s, const std::string& key) {
  auto it = s.find(key);
  return it == s.end() ? std::string() : it->second;
}

}  // namespace

Credentials resolve_credentials(const std::string& profile) {
  auto id = env("AWS_ACCESS_KEY_ID");
  auto secret = env("AWS_SECRET_ACCESS_KEY");
  if (id && secret) return {*id, *secret, env("AWS_SESSION_TOKEN").value_or("")};
  if (id || secret) {
    throw Error::invalid_argument(
        std::string(id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
                       : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not") +
        "; set both (and AWS_SESSION_TOKEN for temporary credentials), or neither to use "
        "the shared credentials file");
  }

  std::string name = profile;
  std::string name_from = "the argument";
  if (name.empty()) {
    auto p = env("AWS_PROFILE");
    name = p.value_or("default");
    name_from = p ? "AWS_PROFILE" : "the default";
  }
  std::optional<std::string> path = aws_file("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  std::string where = path ? *path : "~/.aws/credentials";
  std::string how =
      "; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for "
      "temporary credentials), or put aws_access_key_id and aws_secret_access_key "
      "in section [" +
      name + "] of " + where +
      " (AWS_SHARED_CREDENTIALS_FILE names another file, AWS_PROFILE another "
      "profile)";
  std::string lead = "no AWS credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set";
  auto denied = [&](const std::string& why) {
    throw Error::permission_denied(lead + ", and " + why + how);
  };

  if (!path) denied("HOME is not set, so there is no ~/.aws/credentials");
  FileRead file = read_file(*path);
  if (file.state == FileRead::missing) denied(*path + " does not exist");
  if (file.state == FileRead::unreadable) {
    denied("the credentials file " + *path + " cannot be read (" + file.error + ")");
  }
  Ini ini = parse_ini(file.text);
  const IniSection* s = find_section(ini, name);
  if (!s) denied(*path + " has no section [" + name + "] (profile from " + name_from + ")");
  Credentials c{get(*s, "aws_access_key_id"), get(*s, "aws_secret_access_key"),
                get(*s, "aws_session_token")};
  if (c.access_key_id.empty() && c.secret_access_key.empty()) {
    denied("section [" + name + "] of " + *path +
           " has no aws_access_key_id / aws_secret_access_key (only static keys are read: for "
           "SSO, role or credential_process profiles, export them with `aws configure "
           "export-credentials --profile " +
           name + " --format env`)");
  }
  if (c.access_key_id.empty() || c.secret_access_key.empty()) {
    throw Error::invalid_argument("section [" + name + "] of " + *path + " has " +
                                  (c.access_key_id.empty()
                                       ? "aws_secret_access_key but no aws_access_key_id"
                                       : "aws_access_key_id but no aws_secret_access_key"));
  }
  return c;
}

std::string resolve_region(const std::string& profile) {
  if (auto r = env("AWS_REGION")) return *r;
  if (auto r = env("AWS_DEFAULT_REGION")) return *r;
  std::string name = profile.empty() ? env("AWS_PROFILE").value_or("default") : profile;
  if (auto path = aws_file("AWS_CONFIG_FILE", ".aws/config")) {
    FileRead file = read_file(*path);
    if (file.state == FileRead::ok) {
      Ini ini = parse_ini(file.text);
      // The config file names profiles "[profile NAME]"; the default one also plain "[default]".
      for (const std::string& section :
           {"profile " + name, name == "default" ? name : std::string()}) {
        if (section.empty()) continue;
        if (const IniSection* s = find_section(ini, section)) {
          std::string region = get(*s, "region");
          if (!region.empty()) return region;
        }
      }
    }
  }
  return "us-east-1";
}

}  // namespace wds::s3
