// Credentials, region and endpoint from the environment and the shared AWS
// files (see aws_config.h).
#include "aws/internal/aws_config.h"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "kiln/plugin/json_value.h"

namespace kiln::aws::internal {
namespace {

using ::kiln::PathForMessage;

std::optional<std::string> NonEmpty(std::optional<std::string> v) {
  if (v.has_value() && v->empty()) return std::nullopt;
  return v;
}

std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const std::string* Find(const IniFile& ini, const std::string& section, const std::string& key) {
  auto s = ini.find(section);
  if (s == ini.end()) return nullptr;
  auto k = s->second.find(key);
  if (k == s->second.end() || k->second.empty()) return nullptr;
  return &k->second;
}

}  // namespace

IniFile ParseIni(std::string_view text) {
  IniFile ini;
  std::string section;
  std::string parent;  // the key a nested block belongs to
  for (absl::string_view raw : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    absl::string_view line = absl::StripTrailingAsciiWhitespace(raw);
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    line = absl::StripLeadingAsciiWhitespace(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line[0] == '[') {
      size_t end = line.find(']');
      section = std::string(absl::StripAsciiWhitespace(line.substr(1, end == absl::string_view::npos
                                                                           ? line.size() - 1
                                                                           : end - 1)));
      ini[section];
      parent.clear();
      continue;
    }
    size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(line.substr(eq + 1)));
    if (indented && !parent.empty()) {
      ini[section][absl::StrCat(parent, ".", key)] = value;
      continue;
    }
    parent = value.empty() ? key : "";
    ini[section][key] = value;
  }
  return ini;
}

absl::StatusOr<S3Options> ResolveS3OptionsWith(S3Options options, EnvLookup env) {
  auto var = [&](const char* name) { return NonEmpty(env(name)); };
  const std::string home = var("HOME").value_or("");
  if (options.profile.empty()) {
    options.profile = var("AWS_PROFILE").value_or(var("AWS_DEFAULT_PROFILE").value_or("default"));
  }
  const std::string config_path =
      var("AWS_CONFIG_FILE").value_or(home.empty() ? "" : home + "/.aws/config");
  const std::string credentials_path =
      var("AWS_SHARED_CREDENTIALS_FILE").value_or(home.empty() ? "" : home + "/.aws/credentials");
  IniFile config;
  if (std::optional<std::string> text = ReadWholeFile(config_path)) config = ParseIni(*text);
  std::optional<std::string> credentials_text = ReadWholeFile(credentials_path);
  IniFile credentials_ini;
  if (credentials_text) credentials_ini = ParseIni(*credentials_text);
  const std::string config_section =
      options.profile == "default" ? "default" : absl::StrCat("profile ", options.profile);
  auto from_config = [&](const std::string& key) -> std::optional<std::string> {
    const std::string* v = Find(config, config_section, key);
    if (v == nullptr && options.profile == "default") v = Find(config, "profile default", key);
    return v != nullptr ? std::optional<std::string>(*v) : std::nullopt;
  };

  if (options.region.empty()) {
    options.region = var("AWS_REGION").value_or(
        var("AWS_DEFAULT_REGION").value_or(from_config("region").value_or("us-east-1")));
  }

  bool custom_endpoint = !options.endpoint_url.empty();
  if (options.endpoint_url.empty()) {
    std::optional<std::string> ep = var("AWS_ENDPOINT_URL_S3");
    if (!ep) ep = var("AWS_ENDPOINT_URL");
    if (!ep) ep = from_config("endpoint_url");
    custom_endpoint = ep.has_value();
    options.endpoint_url = ep.value_or(absl::StrCat("https://s3.", options.region, ".amazonaws.com"));
  }
  while (absl::EndsWith(options.endpoint_url, "/")) options.endpoint_url.pop_back();
  if (!absl::StartsWith(options.endpoint_url, "http://") &&
      !absl::StartsWith(options.endpoint_url, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("S3 endpoint '",
                                                   PathForMessage(options.endpoint_url),
                                                   "' must start with http:// or https://"));
  }
  if (const size_t host = options.endpoint_url.find("://") + 3;
      options.endpoint_url.find('/', host) != std::string::npos) {
    // Requests go to the endpoint's root: a path (a gateway mounted below
    // one) would be dropped, and the requests sent elsewhere.
    return absl::InvalidArgumentError(
        absl::StrCat("S3 endpoint '", PathForMessage(options.endpoint_url),
                     "' has a path; Kiln's S3 client addresses the endpoint's root only"));
  }
  if (options.addressing_style == S3AddressingStyle::kAuto) {
    std::optional<std::string> style = from_config("s3.addressing_style");
    if (style == "path") {
      options.addressing_style = S3AddressingStyle::kPath;
    } else if (style == "virtual") {
      options.addressing_style = S3AddressingStyle::kVirtual;
    } else {
      options.addressing_style = custom_endpoint ? S3AddressingStyle::kPath
                                                 : S3AddressingStyle::kVirtual;
    }
  }

  if (options.credentials.has_value()) return options;
  std::optional<std::string> id = var("AWS_ACCESS_KEY_ID");
  std::optional<std::string> secret = var("AWS_SECRET_ACCESS_KEY");
  if (id.has_value() != secret.has_value()) {
    return absl::InvalidArgumentError(
        id ? "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"
           : "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
  }
  if (id) {
    options.credentials = AwsCredentials{*id, *secret, var("AWS_SESSION_TOKEN").value_or("")};
    return options;
  }
  // The shared credentials file names sections by the bare profile name; the
  // config file by "profile <name>" (except default).
  for (const auto& [ini, section] :
       {std::pair<const IniFile*, std::string>{&credentials_ini, options.profile},
        std::pair<const IniFile*, std::string>{&config, config_section}}) {
    const std::string* file_id = Find(*ini, section, "aws_access_key_id");
    const std::string* file_secret = Find(*ini, section, "aws_secret_access_key");
    if (file_id == nullptr && file_secret == nullptr) continue;
    if (file_id == nullptr || file_secret == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("AWS profile '", PathForMessage(options.profile), "' has ",
                       file_id ? "aws_access_key_id but no aws_secret_access_key"
                               : "aws_secret_access_key but no aws_access_key_id",
                       " (", PathForMessage(ini == &config ? config_path : credentials_path), ")"));
    }
    const std::string* token = Find(*ini, section, "aws_session_token");
    options.credentials = AwsCredentials{*file_id, *file_secret, token ? *token : ""};
    return options;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "no AWS credentials for s3://: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or add "
      "profile '", PathForMessage(options.profile), "' to the shared credentials file (",
      credentials_path.empty() ? "no HOME" : PathForMessage(credentials_path),
      credentials_text ? "" : ": not found", ")"));
}

}  // namespace kiln::aws::internal
