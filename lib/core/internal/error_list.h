// ErrorList: the one place request problems are collected, by validation
// (ShapeChecker and the cross-field rules) and by ParseJson's decoder. It
// keeps the first kMaxReportedViolations and only counts the rest, so that a
// document with a million bad elements costs neither a million messages in
// memory nor a message a million lines long.
// Internal: not installed. Thread-compatible.
#ifndef KILN_LIB_CORE_INTERNAL_ERROR_LIST_H_
#define KILN_LIB_CORE_INTERNAL_ERROR_LIST_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/validation.h"

namespace kiln::internal {

template <typename T>
class ErrorList {
 public:
  // Whether a further error would only be counted: a caller may test this to
  // skip making its text.
  bool full() const { return kept_.size() >= static_cast<size_t>(kMaxReportedViolations); }

  // Records one error: kept while fewer than kMaxReportedViolations are,
  // otherwise counted only.
  void Add(T error) {
    ++total_;
    if (kept_.size() < static_cast<size_t>(kMaxReportedViolations)) {
      kept_.push_back(std::move(error));
    }
  }
  // Records one error past the kept ones without its text. REQUIRES: full().
  void Count() { ++total_; }

  bool empty() const { return total_ == 0; }
  // Every error recorded, kept or not.
  int64_t total() const { return total_; }
  // The errors recorded but not kept.
  int64_t more() const { return total_ - static_cast<int64_t>(kept_.size()); }
  // The first errors recorded, in order (at most kMaxReportedViolations).
  const std::vector<T>& kept() const { return kept_; }
  std::vector<T>& kept() { return kept_; }

 private:
  std::vector<T> kept_;
  int64_t total_ = 0;
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_ERROR_LIST_H_
