// Small files of the agents' PKI and state directories: written whole and
// renamed into place, read whole. Errors name the path. Internal to
// kiln::agent. Thread-safe (no shared state).
#ifndef KILN_LIB_AGENT_STATE_FILES_H_
#define KILN_LIB_AGENT_STATE_FILES_H_

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kiln::agent::internal {

// Writes `contents` to `path` whole: a temporary file beside it, mode `mode`,
// synced, renamed over `path`. Errors: Internal naming the path.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents, mode_t mode);
// The contents of `path`; NotFound when it does not exist, Internal naming it
// when it cannot be read.
absl::StatusOr<std::string> ReadFile(const std::string& path);
// Whether something is at `path` (a link is not followed).
bool Exists(const std::string& path);
// mkdir with mode 0700; OK when it exists. Errors: Internal naming the path.
absl::Status MakeDir(const std::string& path);

}  // namespace kiln::agent::internal

#endif  // KILN_LIB_AGENT_STATE_FILES_H_
