// TempFiles: a new directory holding files, removed with the object. For
// tests that load scenarios, traces and job files from disk.
#ifndef KILN_TESTS_SIM_TEMP_FILES_H_
#define KILN_TESTS_SIM_TEMP_FILES_H_

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kiln::sim {

class TempFiles {
 public:
  using Files = std::vector<std::pair<std::string, std::string>>;  // (name, text)
  explicit TempFiles(Files files) : files_(std::move(files)) {
    dir_ = testing::TempDir();
    if (!dir_.empty() && dir_.back() == '/') dir_.pop_back();
    dir_ += "/kiln-files-XXXXXX";
    EXPECT_NE(mkdtemp(dir_.data()), nullptr);
    for (const auto& [name, text] : files_) std::ofstream(dir_ + "/" + name) << text;
  }
  ~TempFiles() {
    for (const auto& [name, text] : files_) std::remove((dir_ + "/" + name).c_str());
    rmdir(dir_.c_str());
  }
  TempFiles(const TempFiles&) = delete;
  TempFiles& operator=(const TempFiles&) = delete;

  const std::string& dir() const { return dir_; }

 private:
  Files files_;
  std::string dir_;
};

}  // namespace kiln::sim

#endif  // KILN_TESTS_SIM_TEMP_FILES_H_
