// A loopback stand-in for the Hugging Face Hub, for the hf:// tests: it answers the Hub's
// documented endpoints and headers, with repositories held in memory.
//
//   wds::test::HubServer hub;
//   const std::string sha = hub.commit("datasets/org/name", "main", {{"a.tar", bytes}});
//   wds::HfOptions options{.endpoint = hub.endpoint()};
//
// Endpoints (the Hub's):
//   GET /{datasets/|spaces/|}ORG/NAME/resolve/REV/PATH: the file; at least cdn_threshold bytes
//     answered 302 to the "CDN", a second server on another port (another host to curl), as
//     the Hub sends large files to its CDN; smaller files 200 from the Hub itself. Both serve
//     Range requests (206 with Content-Range).
//   GET /api/{datasets|models|spaces}/ORG/NAME/revision/REV: {"id": ..., "sha": COMMIT}.
//   GET /api/{...}/ORG/NAME/tree/REV[/PATH][?recursive=true]: a JSON array of {"type": "file" |
//     "directory", "path", "size"}, page_size entries a page, the next page named by a
//     `Link: <URL>; rel="next"` header (cursor=N in its query).
// A private repository answers 401 (X-Error-Code: RepoNotFound) unless the request carries
// "Authorization: Bearer <token>"; a missing repository, revision or file 404 with the Hub's
// X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound) and {"error": ...}.
// throttle(n, s) makes the next n requests to the Hub answer 429 with Retry-After: s.
//
// Thread-safety: every member may be called from any thread while requests are served.
#pragma once

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tests/support/script_server.hpp"

namespace wds::test {

struct HubOptions {
  std::size_t page_size = 2;         // tree entries per page
  std::size_t cdn_threshold = 1024;  // files of this many bytes or more go through the CDN
  std::string token = "hf_fixture_token_0123456789";
};

class HubServer {
 public:

  // What a server saw of a request: its request line and whether it carried a token.
  struct Seen {
    std::string line;
    bool authorization = false;
  };

  explicit HubServer(HubOptions options = {})
      : state_(std::make_shared<State>(std::move(options))),
        cdn_([s = state_](const std::string& r) { return s->cdn(r); }),
        hub_([s = state_](const std::string& r) { return s->hub(r); }) {
    std::lock_guard lock(state_->mu);
    state_->hub_endpoint = "http://127.0.0.1:" + std::to_string(hub_.port());
    state_->cdn_endpoint = "http://127.0.0.1:" + std::to_string(cdn_.port());
  }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_.port()); }
  const std::string& token() const { return state_->options.token; }

  // Makes `files` the new commit of `repo` ("datasets/ORG/NAME", "ORG/NAME" for a model,
  // "spaces/ORG/NAME") on `branch`, created as needed; returns the commit's id.
  std::string commit(const std::string& repo, const std::string& branch,
                     std::map<std::string, std::string> files) {
    std::lock_guard lock(state_->mu);
    char sha[41];
    std::snprintf(sha, sizeof sha, "c0ffee%034zu", ++state_->commits);
    Repo& r = state_->repos[repo];
    r.branches[branch] = sha;
    r.files[sha] = std::move(files);
    return sha;
  }
  void make_private(const std::string& repo) {
    std::lock_guard lock(state_->mu);
    state_->repos[repo].is_private = true;
  }
  void throttle(int requests, int retry_after_seconds) {
    std::lock_guard lock(state_->mu);
    state_->throttle = requests;
    state_->retry_after = retry_after_seconds;
  }

  std::vector<Seen> hub_requests() const {
    std::lock_guard lock(state_->mu);
    return state_->hub_seen;
  }
  std::vector<Seen> cdn_requests() const {
    std::lock_guard lock(state_->mu);
    return state_->cdn_seen;
  }

 private:
  struct Repo {
    bool is_private = false;
    std::map<std::string, std::string> branches;                      // name -> commit
    std::map<std::string, std::map<std::string, std::string>> files;  // commit -> path -> bytes
  };

  struct State {
    explicit State(HubOptions o) : options(std::move(o)) {}

    HubOptions options;
    std::mutex mu;
    std::string hub_endpoint, cdn_endpoint;
    std::map<std::string, Repo> repos;
    std::size_t commits = 0;
    int throttle = 0;
    int retry_after = 0;
    std::vector<Seen> hub_seen, cdn_seen;

    Reply hub(const std::string& request) {
      std::lock_guard lock(mu);
      const std::string target = target_of(request);
      hub_seen.push_back({request.substr(0, request.find("\r\n")), has_token(request)});
      if (throttle > 0) {
        --throttle;
        return error(429, "", "Too many requests",
                     "Retry-After: " + std::to_string(retry_after) + "\r\n");
      }
      const std::string path = target.substr(0, target.find('?'));
      const std::string query =
          target.find('?') == std::string::npos ? "" : target.substr(target.find('?') + 1);
      if (path.rfind("/api/", 0) == 0) return api(request, path.substr(5), query);
      return resolve(request, path.substr(1));
    }

    Reply cdn(const std::string& request) {
      std::lock_guard lock(mu);
      const std::string target = target_of(request);
      cdn_seen.push_back({request.substr(0, request.find("\r\n")), has_token(request)});
      // /cdn/REPO-KEY/COMMIT/PATH?X-Amz-Signature=..., as a signed CDN URL is.
      const std::string path = decode(target.substr(0, target.find('?')));
      for (const auto& [name, repo] : repos) {
        for (const auto& [sha, files] : repo.files) {
          for (const auto& [file, bytes] : files) {
            if (path == "/cdn/" + name + "/" + sha + "/" + file) return serve(request, bytes);
          }
        }
      }
      return error(404, "", "no such CDN object");
    }

    // PATH: {datasets/|spaces/|}ORG/NAME/resolve/REV/FILE
    Reply resolve(const std::string& request, const std::string& path) {
      const std::size_t at = path.find("/resolve/");
      if (at == std::string::npos) return error(404, "", "Not Found");
      const std::string name = path.substr(0, at);
      const std::string rest = path.substr(at + 9);
      const std::string revision = decode(rest.substr(0, rest.find('/')));
      const std::string file =
          rest.find('/') == std::string::npos ? "" : decode(rest.substr(rest.find('/') + 1));
      const std::map<std::string, std::string>* files = nullptr;
      std::string sha;
      if (std::optional<Reply> refused = find(request, name, revision, files, sha)) {
        return *refused;
      }
      auto it = files->find(file);
      if (it == files->end()) return error(404, "EntryNotFound", "Entry not found");
      if (it->second.size() >= options.cdn_threshold) {
        return Reply{.head = "HTTP/1.1 302 Found\r\nLocation: " + cdn_endpoint + "/cdn/" + name +
                             "/" + sha + "/" + file + "?X-Amz-Signature=fixture\r\n" +
                             "X-Repo-Commit: " + sha + "\r\n"};
      }
      return serve(request, it->second);
    }

    // PATH: {datasets|models|spaces}/ORG/NAME/{revision|tree}/REV[/FOLDER]
    Reply api(const std::string& request, const std::string& path, const std::string& query) {
      std::vector<std::string> parts;
      for (std::size_t from = 0;;) {
        const std::size_t slash = path.find('/', from);
        parts.push_back(path.substr(from, slash - from));
        if (slash == std::string::npos) break;
        from = slash + 1;
      }
      if (parts.size() < 5) return error(404, "", "Not Found");
      const std::string kind = parts[0];
      const std::string name = (kind == "models" ? "" : kind + "/") + parts[1] + "/" + parts[2];
      const std::string what = parts[3];
      const std::string revision = decode(parts[4]);
      std::string folder;
      for (std::size_t i = 5; i < parts.size(); ++i) folder += (i > 5 ? "/" : "") + parts[i];
      folder = decode(folder);
      const std::map<std::string, std::string>* files = nullptr;
      std::string sha;
      if (std::optional<Reply> refused = find(request, name, revision, files, sha)) {
        return *refused;
      }
      if (what == "revision") {
        return json("{\"id\": \"" + name + "\", \"sha\": \"" + sha + "\"}");
      }
      if (what != "tree") return error(404, "", "Not Found");
      return tree(*files, folder, query, path);
    }

    Reply tree(const std::map<std::string, std::string>& files, const std::string& folder,
               const std::string& query, const std::string& path) {
      const bool recursive = query.find("recursive=true") != std::string::npos;
      std::size_t cursor = 0;
      if (std::size_t at = query.find("cursor="); at != std::string::npos) {
        cursor = std::stoul(query.substr(at + 7));
      }
      const std::string prefix = folder.empty() ? "" : folder + "/";
      std::set<std::string> dirs;
      std::vector<std::string> entries;  // JSON objects, in path order
      bool any = folder.empty();
      for (const auto& [file, bytes] : files) {
        if (file.rfind(prefix, 0) != 0) continue;
        any = true;
        const std::string below = file.substr(prefix.size());
        // Folders on the way are entries too ("directory"), as the Hub lists them.
        for (std::size_t slash = below.find('/'); slash != std::string::npos;
             slash = recursive ? below.find('/', slash + 1) : std::string::npos) {
          const std::string dir = prefix + below.substr(0, slash);
          if (dirs.insert(dir).second) {
            entries.push_back("{\"type\": \"directory\", \"oid\": \"0\", \"path\": \"" + dir +
                              "\"}");
          }
        }
        if (!recursive && below.find('/') != std::string::npos) continue;
        entries.push_back("{\"type\": \"file\", \"oid\": \"1\", \"size\": " +
                          std::to_string(bytes.size()) + ", \"path\": \"" + file + "\"}");
      }
      if (!any) return error(404, "EntryNotFound", "Entry not found");
      std::string body = "[";
      const std::size_t end = std::min(entries.size(), cursor + options.page_size);
      for (std::size_t i = cursor; i < end; ++i) body += (i > cursor ? ", " : "") + entries[i];
      body += "]";
      std::string link;
      if (end < entries.size()) {
        link = "Link: <" + hub_endpoint + "/api/" + path + "?" +
               (recursive ? "recursive=true&" : "") + "cursor=" + std::to_string(end) +
               ">; rel=\"next\"\r\n";
      }
      return json(body, link);
    }

    // The repository and commit a request names, or the answer refusing it.
    std::optional<Reply> find(const std::string& request, const std::string& name,
                              const std::string& revision,
                              const std::map<std::string, std::string>*& files, std::string& sha) {
      auto repo = repos.find(name);
      if (repo == repos.end()) return error(404, "RepoNotFound", "Repository not found");
      if (repo->second.is_private && request.find("\r\nAuthorization: Bearer " + options.token +
                                                  "\r\n") == std::string::npos) {
        return error(401, "RepoNotFound", "Invalid credentials in Authorization header");
      }
      auto branch = repo->second.branches.find(revision);
      sha = branch != repo->second.branches.end() ? branch->second : revision;
      auto commit = repo->second.files.find(sha);
      if (commit == repo->second.files.end()) {
        return error(404, "RevisionNotFound", "Invalid rev id: " + revision);
      }
      files = &commit->second;
      return std::nullopt;
    }

    static std::string target_of(const std::string& request) {
      const std::size_t sp = request.find(' ');
      return request.substr(sp + 1, request.find(' ', sp + 1) - sp - 1);
    }
    static bool has_token(const std::string& request) {
      for (const char* name : {"\r\nAuthorization:", "\r\nauthorization:"}) {
        if (request.find(name) != std::string::npos) return true;
      }
      return false;
    }
    static std::string decode(const std::string& s) {
      std::string out;
      for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size()) {
          out += static_cast<char>(std::stoi(s.substr(i + 1, 2), nullptr, 16));
          i += 2;
        } else {
          out += s[i];
        }
      }
      return out;
    }
    // The bytes, or the part a "Range: bytes=A-[B]" header asks for.
    static Reply serve(const std::string& request, const std::string& bytes) {
      const std::size_t at = request.find("\r\nRange: bytes=");
      if (at == std::string::npos) return Reply{.head = "HTTP/1.1 200 OK\r\n", .body = bytes};
      const std::string spec = request.substr(at + 15, request.find("\r\n", at + 2) - at - 15);
      const std::size_t from = std::stoul(spec);
      const std::size_t dash = spec.find('-');
      std::size_t to = bytes.size() - 1;
      if (dash + 1 < spec.size()) to = std::min(to, std::stoul(spec.substr(dash + 1)));
      if (from >= bytes.size()) {
        return Reply{.head = "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */" +
                             std::to_string(bytes.size()) + "\r\n"};
      }
      return Reply{.head = "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes " +
                           std::to_string(from) + "-" + std::to_string(to) + "/" +
                           std::to_string(bytes.size()) + "\r\n",
                   .body = bytes.substr(from, to - from + 1)};
    }
    static Reply json(const std::string& body, const std::string& headers = "") {
      return Reply{.head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + headers,
                   .body = body};
    }
    static Reply error(int status, const std::string& code, const std::string& message,
                       const std::string& headers = "") {
      static const std::map<int, std::string> kReasons = {
          {401, "Unauthorized"}, {404, "Not Found"}, {429, "Too Many Requests"}};
      std::string head = "HTTP/1.1 " + std::to_string(status) + " " + kReasons.at(status) +
                         "\r\nContent-Type: application/json\r\n" + headers;
      if (!code.empty()) head += "X-Error-Code: " + code + "\r\n";
      head += "X-Error-Message: " + message + "\r\n";
      return Reply{.head = head, .body = "{\"error\": \"" + message + "\"}"};
    }
  };

  std::shared_ptr<State> state_;
  // Declared last: their threads are joined first, while the state they serve still exists.
  ScriptServer cdn_;
  ScriptServer hub_;
};

}  // namespace wds::test
