// The AWS way of finding credentials, region and endpoint: environment
// variables, then the shared credentials and config files (INI). See
// kiln/aws/s3.h for the order.
//
// Internal to kiln::aws: never installed. Thread-safe.
#ifndef KILN_LIB_AWS_INTERNAL_AWS_CONFIG_H_
#define KILN_LIB_AWS_INTERNAL_AWS_CONFIG_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "kiln/aws/s3.h"

namespace kiln::aws::internal {

// Looks an environment variable up; nullopt when unset.
using EnvLookup = absl::FunctionRef<std::optional<std::string>(const char* name)>;

// Sections of an INI file: section name -> key -> value. Keys nested under
// an indented block ("s3 =\n  addressing_style = path") are "s3.addressing_style".
// Comments start with '#' or ';'. Keys are lower-cased.
using IniFile = std::map<std::string, std::map<std::string, std::string>>;
IniFile ParseIni(std::string_view text);

// ResolveS3Options with the environment given by `env`.
absl::StatusOr<S3Options> ResolveS3OptionsWith(S3Options options, EnvLookup env);

}  // namespace kiln::aws::internal

#endif  // KILN_LIB_AWS_INTERNAL_AWS_CONFIG_H_
