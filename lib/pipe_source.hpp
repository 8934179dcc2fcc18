// pipe: URLs as ByteSources: the standard output of a shell command ("pipe:curl -s URL").
#pragma once

#include <memory>
#include <string>

#include "wds/source.hpp"

namespace wds {

// Runs the command after "pipe:" through /bin/sh -c, with stdin from /dev/null and stderr
// inherited, and streams its stdout in reads of up to options.buffer_size bytes.
//
// Refused (permission_denied) unless options.allow_pipe or WDS_ALLOW_PIPE=1, since the URL is a
// shell command. options.offset must be 0: a pipe cannot seek (invalid_argument).
//
// At the end of the output read() reaps the command and throws an unavailable Error if it exited
// with a non-zero status or was killed by a signal, so a failed command never passes for a short
// shard; later calls throw the same Error. Destroying the source while the command still runs
// closes the pipe and stops the command's process group (SIGTERM, SIGKILL after about a second)
// and reaps it.
std::unique_ptr<ByteSource> open_pipe_source(const std::string& url, const OpenOptions& options);

}  // namespace wds
