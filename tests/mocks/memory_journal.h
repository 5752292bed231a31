// A Journal for engine tests: keeps the latest record of each job in memory,
// as a database would, so that a second engine can recover from it, and the
// last billing mark. It can be made to fail its writes, and counts the waits
// callers make.
// Thread-safe.
#ifndef KILN_TESTS_MOCKS_MEMORY_JOURNAL_H_
#define KILN_TESTS_MOCKS_MEMORY_JOURNAL_H_

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "absl/status/status.h"
#include "kiln/journal.h"

namespace kiln {

class MemoryJournal : public Journal {
 public:
  absl::Status Recover(absl::FunctionRef<absl::Status(JobRecord&&)> job) override {
    std::map<uint64_t, JobRecord> copy;
    absl::Time mark;
    {
      std::lock_guard<std::mutex> lock(mu_);
      copy = jobs_;
      mark = mark_;
    }
    for (auto& [id, record] : copy) {
      if (record.held_since != absl::InfinitePast()) {
        record.held_until = std::max(record.held_until, mark);
      }
      if (absl::Status s = job(std::move(record)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  Ticket Append(JobRecord record) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++appended;
    if (!failure_.ok()) return ++ticket_;
    auto it = jobs_.find(record.id);
    if (it != jobs_.end() && record.request == nullptr) record.request = it->second.request;
    jobs_[record.id] = std::move(record);
    return ++ticket_;
  }
  Ticket Erase(uint64_t id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.ok()) jobs_.erase(id);
    return ++ticket_;
  }
  void Mark(absl::Time time) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++marks;
    if (failure_.ok()) mark_ = time;
  }
  absl::Status Wait(Ticket ticket) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++waits;
    return failure_;
  }
  absl::Status Flush() override { return Wait(0); }
  bool read_only() const override { return read_only_; }

  // From now on every write fails with `error` (and is dropped).
  void Fail(absl::Status error) {
    std::lock_guard<std::mutex> lock(mu_);
    failure_ = std::move(error);
  }
  void set_read_only(bool read_only) { read_only_ = read_only; }
  // The latest record of job `id`, or null.
  const JobRecord* Find(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : &it->second;
  }
  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.size();
  }

  int waits = 0;     // Wait and Flush calls
  int appended = 0;  // Append calls
  int marks = 0;     // Mark calls
  // The last mark.
  absl::Time mark() {
    std::lock_guard<std::mutex> lock(mu_);
    return mark_;
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, JobRecord> jobs_;
  Ticket ticket_ = 0;
  absl::Time mark_ = absl::InfinitePast();
  absl::Status failure_;
  bool read_only_ = false;
};

}  // namespace kiln

#endif  // KILN_TESTS_MOCKS_MEMORY_JOURNAL_H_
