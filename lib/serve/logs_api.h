// CloudWatch Logs' read API for training logs (botocore's "logs" model: JSON
// 1.1, X-Amz-Target "Logs_20140328.<Operation>"): DescribeLogStreams,
// GetLogEvents and FilterLogEvents on the log group
// /aws/sagemaker/TrainingJobs of one account, read from a LogReader.
//
// Tokens are opaque to clients: GetLogEvents' are "f/<position>" and
// "b/<position>" (a forward read that finds nothing new gives back the token
// it was given, which is where the SageMaker SDK's log loop stops);
// FilterLogEvents' carries where each stream's search stopped.
//
// Internal to kiln::serve: never installed. Thread-safe (the reader is).
#ifndef KILN_LIB_SERVE_LOGS_API_H_
#define KILN_LIB_SERVE_LOGS_API_H_

#include <string_view>

#include "kiln/log_reader.h"
#include "serve/api.h"

namespace kiln::serve::internal {

// The prefix of the operations' X-Amz-Target, and the service their
// signatures are scoped to.
inline constexpr char kLogsTargetPrefix[] = "Logs_20140328.";
inline constexpr char kLogsService[] = "logs";

// Answers `operation` (the X-Amz-Target after the prefix) with request body
// `body`, for `account` in `region` (ARNs). `reader` null: the account has no
// logs (every log group is unknown).
HttpResponse HandleLogs(std::string_view operation, std::string_view body, const LogReader* reader,
                        std::string_view region, std::string_view account);

}  // namespace kiln::serve::internal

#endif  // KILN_LIB_SERVE_LOGS_API_H_
