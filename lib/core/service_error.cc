#include "kiln/service_error.h"

#include <string_view>

#include "absl/status/status.h"

namespace kiln {
namespace {

constexpr ServiceError kValidation{"ValidationException", 400};
constexpr ServiceError kNotFound{"ResourceNotFound", 400};
constexpr ServiceError kInUse{"ResourceInUse", 400};
constexpr ServiceError kLimit{"ResourceLimitExceeded", 400};
constexpr ServiceError kAccessDenied{"AccessDeniedException", 400};
constexpr ServiceError kUnavailable{"ServiceUnavailable", 503};
constexpr ServiceError kInternal{"InternalFailure", 500};

}  // namespace

ServiceError ToServiceError(std::string_view operation, const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return ServiceError{};
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return kValidation;
    case absl::StatusCode::kNotFound:
      return operation == "DescribeTrainingJob" ? kValidation : kNotFound;
    case absl::StatusCode::kAlreadyExists:
      return kInUse;
    case absl::StatusCode::kFailedPrecondition:
      return operation == "DeleteTrainingJob" ? kInUse : kValidation;
    case absl::StatusCode::kResourceExhausted:
      return kLimit;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kUnauthenticated:
      return kAccessDenied;
    case absl::StatusCode::kUnavailable:
      return kUnavailable;
    default:
      return kInternal;
  }
}

}  // namespace kiln
