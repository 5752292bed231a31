// Helpers of the ObjectStore tests: a temporary directory and local files.
#ifndef KILN_TESTS_CONFORMANCE_OBJECT_STORE_TEST_UTIL_H_
#define KILN_TESTS_CONFORMANCE_OBJECT_STORE_TEST_UTIL_H_

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "gtest/gtest.h"
#include "kiln/object_store.h"

namespace kiln::store_testing {

namespace fs = std::filesystem;

// A fresh directory under the test temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "kiln-object-store-XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string ReadLocal(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inline void WriteLocal(const std::string& path, std::string_view data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Names of the entries of `dir` (not recursive), sorted.
inline std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

inline std::string Pattern(size_t size, uint32_t seed) {
  std::string data(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : data) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 23);
  }
  return data;
}

inline std::vector<std::string> Uris(const std::vector<ObjectInfo>& infos) {
  std::vector<std::string> uris;
  for (const ObjectInfo& info : infos) uris.push_back(info.uri);
  return uris;
}

}  // namespace kiln::store_testing

#endif  // KILN_TESTS_CONFORMANCE_OBJECT_STORE_TEST_UTIL_H_
