#include "kiln/spot.h"

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace kiln {
namespace {

class DefaultSpotInterruptionHandler final : public SpotInterruptionHandler {
 public:
  explicit DefaultSpotInterruptionHandler(DefaultSpotHandlerOptions options) : options_(options) {}

  InterruptionDecision OnInterruption(const InterruptionContext& c) override {
    return DefaultInterruptionDecision(c, options_.retry_delay);
  }

  std::string Name() const override { return "Default"; }

 private:
  DefaultSpotHandlerOptions options_;
};

}  // namespace

InterruptionDecision DefaultInterruptionDecision(const InterruptionContext& c,
                                                 absl::Duration retry_delay) {
  InterruptionDecision d;
  d.use_spot = c.on_spot;
  d.delay = retry_delay;
  if (c.preempted) return d;  // bounded by MaxWaitTimeInSeconds, which the engine enforces
  if (c.infrastructure_failures <= c.max_retry_attempts) return d;
  d.action = InterruptionDecision::Action::kGiveUp;
  d.failure_reason =
      c.max_retry_attempts == 0
          ? absl::StrCat("InternalServerError: instance ", std::string(c.host_name),
                         " was lost; the job has no RetryStrategy")
          : absl::StrCat("InternalServerError: instance ", std::string(c.host_name),
                         " was lost; RetryStrategy.MaximumRetryAttempts (", c.max_retry_attempts,
                         ") is used up");
  return d;
}

std::unique_ptr<SpotInterruptionHandler> NewDefaultSpotInterruptionHandler(
    DefaultSpotHandlerOptions options) {
  return std::make_unique<DefaultSpotInterruptionHandler>(options);
}

}  // namespace kiln
