// Argument checks every ObjectStore implementation makes the same way, so
// that a bad range or limit gets the same error from every store.
#ifndef KILN_CORE_INTERNAL_OBJECT_STORE_ARGS_H_
#define KILN_CORE_INTERNAL_OBJECT_STORE_ARGS_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"

namespace kiln::internal {

// ReadRange's: InvalidArgument naming `uri` for a negative offset or length.
absl::Status CheckRange(std::string_view uri, int64_t offset, int64_t length);

// ListFirst's: InvalidArgument naming `prefix` for max_objects < 1.
absl::Status CheckMaxObjects(std::string_view prefix, int64_t max_objects);

}  // namespace kiln::internal

#endif  // KILN_CORE_INTERNAL_OBJECT_STORE_ARGS_H_
