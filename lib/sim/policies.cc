#include "kiln/sim/policies.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/cluster_provider.h"

namespace kiln::sim {
namespace {

std::string Seconds(absl::Duration d) { return absl::StrCat(absl::ToInt64Seconds(d), "s"); }

class UniformProgressHandler final : public SpotInterruptionHandler {
 public:
  explicit UniformProgressHandler(UniformProgressOptions options) : options_(std::move(options)) {}

  InterruptionDecision OnInterruption(const InterruptionContext& c) override {
    InterruptionDecision d = DefaultInterruptionDecision(c, options_.retry_delay);
    if (d.action == InterruptionDecision::Action::kGiveUp) return d;
    // The attempt has ended: the job holds nothing now.
    d.use_spot = Decide(c.job_name, c.on_spot, c.now, /*holding=*/false);
    return d;
  }

  absl::Duration ReviewPeriod() const override { return options_.tick; }

  bool Review(const CapacityReview& c) override {
    return Decide(c.job_name, c.on_spot, c.now, c.when == CapacityReview::When::kRunning);
  }

  std::string Name() const override { return "UniformProgress"; }

 private:
  bool Decide(std::string_view job, bool on_spot, absl::Time now, bool holding) {
    bool spot = on_spot;
    std::optional<ProgressView> view;
    if (options_.view) view = options_.view(job);
    if (view) {
      view->on_spot = on_spot;
      // (Asked only when it can matter: a job that holds spot stays unless
      // the safety net says otherwise.)
      const bool available =
          !(holding && on_spot) && options_.spot_available && options_.spot_available(job);
      spot = UniformProgressUsesSpot(*view, now, options_.params, holding, available);
    }
    if (options_.on_decision) options_.on_decision(job, spot);
    return spot;
  }

  UniformProgressOptions options_;
};

}  // namespace

std::string KeepAliveChoice::Name() const {
  switch (kind) {
    case Kind::kNever:
      return "Never";
    case Kind::kJobRequested:
      return "JobRequested";
    case Kind::kFixed:
      return absl::StrCat("Fixed(", Seconds(fixed), ")");
    case Kind::kAdaptive:
      if (adaptive.review_every > absl::ZeroDuration()) {
        return absl::StrCat("AdaptiveHistogram(p", adaptive.percentile * 100, ", review ",
                            Seconds(adaptive.review_every), ")");
      }
      return absl::StrCat("AdaptiveHistogram(p", adaptive.percentile * 100, ")");
  }
  return "";
}

std::shared_ptr<KeepAlivePolicy> KeepAliveChoice::New() const {
  switch (kind) {
    case Kind::kNever:
      return NewNeverKeepAlive();
    case Kind::kJobRequested:
      return NewJobRequestedKeepAlive();
    case Kind::kFixed:
      return NewFixedKeepAlive(fixed);
    case Kind::kAdaptive:
      return NewAdaptiveHistogramKeepAlive(adaptive);
  }
  return NewJobRequestedKeepAlive();
}

std::string SpotChoice::Name() const {
  switch (kind) {
    case Kind::kOnDemand:
      return "OnDemand";
    case Kind::kSpot:
      return absl::StrCat("Spot(ckpt ", Seconds(checkpoint_interval), ")");
    case Kind::kUniformProgress:
      return absl::StrCat("UniformProgress(ckpt ", Seconds(checkpoint_interval), ")");
  }
  return "";
}

absl::Duration SafetyExcess(const ProgressView& v, absl::Time now, double restarts) {
  return (v.deadline - now) - (v.work - v.progress) * v.pace - v.margin * restarts;
}

bool UniformProgressUsesSpot(const ProgressView& v, absl::Time now,
                             const UniformProgressParams& params, bool holding,
                             bool spot_available) {
  // The safety net first: on-demand from here on (on on-demand the excess no
  // longer shrinks, so it stays so).
  if (SafetyExcess(v, now, params.safety_restarts) < absl::ZeroDuration()) return false;
  // The line from (arrival, 0) to (deadline, work).
  const absl::Duration span = v.deadline - v.arrival;
  if (span <= absl::ZeroDuration()) return false;
  const double elapsed = std::clamp(absl::FDivDuration(now - v.arrival, span), 0.0, 1.0);
  const absl::Duration ahead = v.progress - v.work * elapsed;
  if (v.on_spot) {
    // Spot held is kept until preempted; spot there is taken; without
    // either, the job waits while on or above the line.
    return holding || spot_available || ahead >= absl::ZeroDuration();
  }
  // Back to spot only when it is there, and the job is ahead of the line by
  // what the move costs (a restart: the margin) plus the hysteresis.
  return spot_available && ahead >= v.margin + params.hysteresis;
}

double WorstCasePace(const SimModels& models, const v1::CreateTrainingJobRequest& request,
                     const SimJobAttributes& attributes) {
  if (attributes.work <= absl::ZeroDuration() || attributes.data_bytes <= 0) return 1.0;
  bool pipe = false;
  for (const v1::Channel& c : request.input_data_config()) {
    if (c.data_source().has_file_system_data_source()) continue;
    pipe = pipe || EffectiveInputMode(request, c) == "Pipe";
  }
  if (!pipe) return 1.0;
  // Channels stream side by side, each data_bytes, epochs times over.
  const absl::Duration stream =
      models.data.pipe_rate.MaxTime(attributes.data_bytes) * std::max<int64_t>(1, attributes.epochs);
  return std::max(1.0, absl::FDivDuration(stream, attributes.work));
}

absl::Duration RestartMargin(const SimModels& models, const v1::CreateTrainingJobRequest& request,
                             const SimJobAttributes& attributes, absl::Duration checkpoint_interval,
                             absl::Duration retry_delay) {
  const auto& rc = request.resource_config();
  absl::Duration provisioning, start, image;
  auto add_type = [&](const std::string& type) {
    const InstanceTypeModel& t = models.Type(type);
    provisioning = std::max(provisioning, t.provisioning.Max());
    start = std::max(start, t.container_start.Max());
    image = std::max(image, t.image_pull.MaxTime(attributes.image_bytes));
  };
  if (rc.instance_groups_size() > 0) {
    for (const auto& g : rc.instance_groups()) add_type(g.instance_type());
  } else {
    add_type(rc.instance_type());
  }
  absl::Duration data;
  for (const v1::Channel& c : request.input_data_config()) {
    const std::string mode =
        c.data_source().has_file_system_data_source() ? "FSx" : EffectiveInputMode(request, c);
    data = std::max(data, models.data.Max(mode, attributes.data_bytes));
  }
  const absl::Duration notice = models.Type(rc.instance_groups_size() > 0 ? rc.instance_groups(0).instance_type()
                                                                        : rc.instance_type())
                                    .spot_notice;
  // Capacity errors and the engine's first capacity retry: one round.
  const absl::Duration capacity = models.capacity_error_latency + absl::Seconds(30);
  return checkpoint_interval * WorstCasePace(models, request, attributes) + notice + retry_delay + capacity + provisioning + start + image + data +
         attributes.upload + absl::Seconds(5);
}

std::unique_ptr<SpotInterruptionHandler> NewUniformProgressHandler(UniformProgressOptions options) {
  return std::make_unique<UniformProgressHandler>(std::move(options));
}

}  // namespace kiln::sim
