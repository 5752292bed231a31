// RecentRequests: the CreateTrainingJob requests an engine has accepted
// lately, by content, so that one sent again under a new name needs only its
// name validated and its jobs share one parsed copy.
#ifndef KILN_CORE_INTERNAL_RECENT_REQUESTS_H_
#define KILN_CORE_INTERNAL_RECENT_REQUESTS_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "kiln/v1/sagemaker.pb.h"

namespace kiln::internal {

// A CreateTrainingJobRequest serialized deterministically (map entries in key
// order, so equal requests give equal bytes), with what follows its
// TrainingJobName apart: the request's content, the same for every job made
// from it under another name. (TrainingJobName is field 1, which comes first.)
class SerializedRequest {
 public:
  // Sizes `request` (protobuf caches each message's size in it) without
  // serializing it yet. `request` must outlive this and not change.
  explicit SerializedRequest(const v1::CreateTrainingJobRequest& request);
  explicit SerializedRequest(const v1::CreateTrainingJobRequest&& request) = delete;

  // Requests larger than this are not looked up or remembered, which bounds
  // what RecentRequests holds to 2 MiB. A usual request is under 2 KiB; a
  // valid one can reach a few hundred (100 hyperparameters of 2,500
  // characters), and one that large costs its validation and copy anyway.
  static constexpr size_t kMaxBytes = size_t{32} << 10;
  bool cacheable() const { return size_ <= kMaxBytes; }

  // Bytes of the content (content().size() once serialized).
  size_t content_size() const { return size_ - name_size_; }

  // Serializes the request (once; later calls do nothing). REQUIRES:
  // cacheable(). Serializing a string field that is not UTF-8 makes protobuf
  // log an error: serialize a request that may hold one only once it is
  // validated.
  void Serialize();

  // The request, serialized. REQUIRES: Serialize().
  const std::string& bytes() const { return bytes_; }
  std::string TakeBytes() && { return std::move(bytes_); }
  // bytes() after TrainingJobName. REQUIRES: Serialize().
  std::string_view content() const { return std::string_view(bytes_).substr(name_size_); }
  // A hash of content(). REQUIRES: Serialize().
  size_t content_hash() const { return content_hash_; }

 private:
  const v1::CreateTrainingJobRequest& request_;
  size_t size_;
  size_t name_size_;  // TrainingJobName's tag, length and text
  bool serialized_ = false;
  std::string bytes_;
  size_t content_hash_ = 0;
};

// The contents (SerializedRequest::content) of the last kCapacity distinct
// requests accepted, each with the parsed copy that jobs made from it share
// while some job holds one. First in, first out. A request is Remembered only
// once it has passed every check that depends on the request alone (its
// name's aside), so one found here needs only its name checked.
// Thread-safe.
class RecentRequests {
 public:
  static constexpr size_t kCapacity = 64;

  RecentRequests() = default;
  RecentRequests(const RecentRequests&) = delete;
  RecentRequests& operator=(const RecentRequests&) = delete;

  // False when no content of `size` bytes is held: then Find would not find
  // one, and the request need not be serialized to look it up. (Without the
  // lock: a content being remembered meanwhile may be missed.)
  bool MayHold(size_t size) const {
    return sizes_[size % kSizeBuckets].load(std::memory_order_relaxed) != 0;
  }

  struct Found {
    bool seen = false;  // the content is held
    // The copy its jobs share; null when none is alive (no job holds it).
    std::shared_ptr<const v1::CreateTrainingJobRequest> shared;
  };
  // Looks up `request`'s content. REQUIRES: request.Serialize().
  Found Find(const SerializedRequest& request) const;

  // Holds `request`'s content (a copy), dropping the oldest when full.
  // Nothing when it is held already. REQUIRES: request.Serialize().
  void Remember(const SerializedRequest& request);

  // Makes `shared` the copy that jobs with `request`'s content share, unless
  // one is alive already: returns the one to use. The entry keeps only a
  // weak reference, which the last job to hold the copy lets go. When the
  // content is not held (dropped meanwhile), returns `shared` and keeps
  // nothing. REQUIRES: request.Serialize().
  std::shared_ptr<const v1::CreateTrainingJobRequest> Share(
      const SerializedRequest& request, std::shared_ptr<const v1::CreateTrainingJobRequest> shared);

  // How many contents are held.
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return index_.size();
  }

 private:
  // Counts of held contents by size, modulo kSizeBuckets (kCapacity < 256).
  static constexpr size_t kSizeBuckets = 256;
  struct Entry {
    std::string content;
    size_t hash = 0;  // SerializedRequest::content_hash
    std::weak_ptr<const v1::CreateTrainingJobRequest> shared;
  };
  // A content with its hash, which a request computes once (hashing a few
  // hundred bytes costs as much as the rest of a look-up).
  struct Key {
    std::string_view content;
    size_t hash;
    bool operator==(const Key& other) const { return content == other.content; }
  };
  struct KeyHash {
    size_t operator()(const Key& key) const { return key.hash; }
  };
  static Key KeyOf(const SerializedRequest& request) {
    return Key{request.content(), request.content_hash()};
  }

  // Guards what follows. (A std::mutex: an absl::Mutex built, as Debian
  // builds it, with deadlock detection costs ~300 instructions more a call,
  // and a CreateTrainingJob takes this one twice.)
  mutable std::mutex mu_;
  std::array<Entry, kCapacity> entries_;
  size_t next_ = 0;  // the entry to fill next (the oldest when full)
  // Contents (views of entries_[i].content) to their entry.
  absl::flat_hash_map<Key, Entry*, KeyHash> index_;
  // Written under mu_ (CountSize).
  std::array<std::atomic<uint8_t>, kSizeBuckets> sizes_ = {};
  void CountSize(size_t size, int delta) {
    std::atomic<uint8_t>& count = sizes_[size % kSizeBuckets];
    count.store(static_cast<uint8_t>(count.load(std::memory_order_relaxed) + delta),
                std::memory_order_relaxed);
  }
};

}  // namespace kiln::internal

#endif  // KILN_CORE_INTERNAL_RECENT_REQUESTS_H_
