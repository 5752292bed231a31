#include "core/internal/recent_requests.h"

#include <utility>

#include "absl/hash/hash.h"

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace kiln::internal {

SerializedRequest::SerializedRequest(const v1::CreateTrainingJobRequest& request)
    : request_(request), size_(request.ByteSizeLong()), name_size_(0) {
  if (request.has_training_job_name()) {
    const size_t length = request.training_job_name().size();
    name_size_ = 1 + google::protobuf::io::CodedOutputStream::VarintSize64(length) + length;
  }
}

void SerializedRequest::Serialize() {
  if (serialized_) return;
  serialized_ = true;
  bytes_.resize(size_);
  google::protobuf::io::ArrayOutputStream array(bytes_.data(), static_cast<int>(size_));
  google::protobuf::io::CodedOutputStream out(&array);
  out.SetSerializationDeterministic(true);  // map entries in key order
  request_.SerializeWithCachedSizes(&out);
  content_hash_ = absl::HashOf(content());
}

RecentRequests::Found RecentRequests::Find(const SerializedRequest& request) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(KeyOf(request));
  if (it == index_.end()) return {};
  return {true, it->second->shared.lock()};
}

void RecentRequests::Remember(const SerializedRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.contains(KeyOf(request))) return;
  Entry& e = entries_[next_];
  next_ = (next_ + 1) % kCapacity;
  if (index_.size() == kCapacity) {  // e is the oldest: it goes
    index_.erase(Key{e.content, e.hash});
    CountSize(e.content.size(), -1);
  }
  e.content.assign(request.content());
  e.hash = request.content_hash();
  e.shared.reset();
  index_.emplace(Key{e.content, e.hash}, &e);
  CountSize(e.content.size(), +1);
}

std::shared_ptr<const v1::CreateTrainingJobRequest> RecentRequests::Share(
    const SerializedRequest& request, std::shared_ptr<const v1::CreateTrainingJobRequest> shared) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(KeyOf(request));
  if (it == index_.end()) return shared;
  if (auto alive = it->second->shared.lock()) return alive;  // another caller's, first
  it->second->shared = shared;
  return shared;
}

}  // namespace kiln::internal
