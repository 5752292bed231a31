// Argument checks every ObjectStore implementation makes the same way, so
// that a bad range or limit gets the same error from every store.
// Part of the plugin kit (docs/plugins.md). Thread-safe.
#ifndef KILN_PLUGIN_OBJECT_STORE_CHECKS_H_
#define KILN_PLUGIN_OBJECT_STORE_CHECKS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace kiln {

// ReadRange's: InvalidArgument naming `uri` for a negative offset or length.
absl::Status CheckRange(std::string_view uri, int64_t offset, int64_t length);

// ListFirst's: InvalidArgument naming `prefix` for max_objects < 1.
absl::Status CheckMaxObjects(std::string_view prefix, int64_t max_objects);

}  // namespace kiln

#endif  // KILN_PLUGIN_OBJECT_STORE_CHECKS_H_
