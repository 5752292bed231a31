// Status propagation helpers. Debian's Abseil (20220623) has no
// ABSL_RETURN_IF_ERROR / ASSIGN_OR_RETURN, so Kiln keeps its own. Part of the
// plugin kit (docs/plugins.md); no other public header uses them.
#ifndef KILN_PLUGIN_STATUS_MACROS_H_
#define KILN_PLUGIN_STATUS_MACROS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define KILN_RETURN_IF_ERROR(expr)                 \
  do {                                             \
    ::absl::Status kiln_status_ = (expr);          \
    if (!kiln_status_.ok()) return kiln_status_;   \
  } while (false)

#define KILN_STATUS_MACROS_CONCAT_INNER_(a, b) a##b
#define KILN_STATUS_MACROS_CONCAT_(a, b) KILN_STATUS_MACROS_CONCAT_INNER_(a, b)

// Evaluates `rexpr` (an absl::StatusOr<T>); on error returns its status,
// otherwise assigns the value to `lhs` (which may be a declaration).
#define KILN_ASSIGN_OR_RETURN(lhs, rexpr) \
  KILN_ASSIGN_OR_RETURN_IMPL_(KILN_STATUS_MACROS_CONCAT_(kiln_statusor_, __LINE__), lhs, rexpr)

#define KILN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

#endif  // KILN_PLUGIN_STATUS_MACROS_H_
