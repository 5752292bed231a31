// A gmock action for the doubles of tests/mocks: completes a call's callback later, on the
// loop, as the contracts of cluster_provider.h and data_channel.h require (never inline inside
// the call, always on the loop thread).
//
//   MockClusterProvider provider;
//   EXPECT_CALL(provider, Provision(_, _))
//       .WillOnce(CompleteLater<1>(*loop, absl::StatusOr<Cluster>(cluster)));
//   EXPECT_CALL(provider, PrepareImage(_, _, _)).WillOnce(CompleteLater<2>(*loop, absl::OkStatus()));
#ifndef KILN_TESTS_MOCKS_COMPLETE_LATER_H_
#define KILN_TESTS_MOCKS_COMPLETE_LATER_H_

#include <cstddef>
#include <tuple>
#include <utility>

#include "kiln/event_loop.h"

namespace kiln::mocks {

// Returns an action that posts to `loop` a call of the callback that is argument `kArg` of the
// mocked call, with `value` (a copy per call, so the action may repeat). `loop` must outlive
// the posts.
template <size_t kArg, class T>
auto CompleteLater(EventLoop& loop, T value) {
  return [&loop, value = std::move(value)](auto&&... args) {
    auto& callback = std::get<kArg>(std::forward_as_tuple(args...));
    loop.Post([callback = std::move(callback), value = value]() mutable {
      callback(std::move(value));
    });
  };
}

}  // namespace kiln::mocks

#endif  // KILN_TESTS_MOCKS_COMPLETE_LATER_H_
