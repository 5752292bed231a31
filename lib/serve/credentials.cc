// The credentials file (kiln/serve/server.h, ReadCredentialsFile).
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "kiln/serve/server.h"

namespace kiln::serve {

absl::StatusOr<std::vector<Account>> ReadCredentialsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    const std::string why = absl::StrCat("credentials file '", path, "': ", std::strerror(err));
    return err == EACCES ? absl::PermissionDeniedError(why) : absl::NotFoundError(why);
  }
  std::vector<Account> accounts;
  std::set<std::string> keys;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    const std::vector<std::string> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (fields.empty()) continue;
    const std::string where = absl::StrCat(path, ":", number, ": ");
    if (fields.size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "want ACCESS_KEY_ID SECRET_ACCESS_KEY ACCOUNT_ID, found ",
                       fields.size(), fields.size() == 1 ? " field" : " fields"));
    }
    if (fields[2].size() != 12 ||
        !std::all_of(fields[2].begin(), fields[2].end(), absl::ascii_isdigit)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "the account id must be 12 digits, not '", fields[2], "'"));
    }
    if (!keys.insert(fields[0]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "access key id '", fields[0], "' is given twice"));
    }
    accounts.push_back(Account{fields[0], fields[1], fields[2]});
  }
  if (accounts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("credentials file '", path, "' has no key"));
  }
  return accounts;
}

}  // namespace kiln::serve
