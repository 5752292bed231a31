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

class DeadlineSpotHandler final : public SpotInterruptionHandler {
 public:
  explicit DeadlineSpotHandler(DeadlineSpotOptions options) : options_(std::move(options)) {}

  InterruptionDecision OnInterruption(const InterruptionContext& c) override {
    InterruptionDecision d = DefaultInterruptionDecision(c, options_.retry_delay);
    if (d.action == InterruptionDecision::Action::kGiveUp) return d;
    // The attempt has ended: the job holds nothing now, and the policy is
    // asked again before the retry.
    d.use_spot = Decide(c.job_name, c.on_spot, c.now, /*holding=*/false, d.delay);
    return d;
  }

  absl::Duration ReviewPeriod() const override { return options_.rules.tick; }

  bool Review(const CapacityReview& c) override {
    // Reviews come every tick from the job's creation.
    const absl::Duration tick = options_.rules.tick;
    absl::Duration into_tick;
    absl::IDivDuration(c.now - c.creation_time, tick, &into_tick);
    return Decide(c.job_name, c.on_spot, c.now, c.when == CapacityReview::When::kRunning,
                  tick - into_tick);
  }

  std::string Name() const override {
    return options_.rules.rule == DeadlineSpotRules::Rule::kGreedy ? "Greedy" : "UniformProgress";
  }

 private:
  bool Decide(std::string_view job, bool on_spot, absl::Time now, bool holding,
              absl::Duration next_decision) {
    bool spot = on_spot;
    std::optional<ProgressView> view;
    if (options_.view) view = options_.view(job);
    if (view) {
      view->on_spot = on_spot;
      CapacityNow c;
      c.holding = holding;
      c.next_decision = next_decision;
      // (Asked only when it can matter: a job that holds spot keeps it.)
      c.spot_available =
          !(holding && on_spot) && options_.spot_available && options_.spot_available(job);
      spot = DeadlineSpotUsesSpot(*view, now, options_.rules, c);
    }
    if (options_.on_decision) options_.on_decision(job, spot);
    return spot;
  }

  DeadlineSpotOptions options_;
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
  const DeadlineSpotRules defaults;
  std::string params;
  if (kind == Kind::kUniformProgress && rules.hysteresis_factor != defaults.hysteresis_factor) {
    absl::StrAppend(&params, ", hysteresis ", rules.hysteresis_factor);
  }
  if (rules.safety_factor != defaults.safety_factor)
    absl::StrAppend(&params, ", safety ", rules.safety_factor);
  if (rules.tick != defaults.tick) absl::StrAppend(&params, ", tick ", Seconds(rules.tick));
  if (rules.changeover) absl::StrAppend(&params, ", d ", Seconds(*rules.changeover));
  switch (kind) {
    case Kind::kOnDemand:
      return "OnDemand";
    case Kind::kSpot:
      return absl::StrCat("Spot(ckpt ", Seconds(checkpoint_interval), ")");
    case Kind::kGreedy:
      return absl::StrCat("Greedy(ckpt ", Seconds(checkpoint_interval), params, ")");
    case Kind::kUniformProgress:
      return absl::StrCat("UniformProgress(ckpt ", Seconds(checkpoint_interval), params, ")");
  }
  return "";
}

absl::Duration Slack(const ProgressView& v, absl::Time now) {
  return (v.deadline - now) - (v.work - v.progress) * v.pace;
}

bool DeadlineSpotUsesSpot(const ProgressView& v, absl::Time now, const DeadlineSpotRules& rules,
                          const CapacityNow& c) {
  // Spot held is kept until it is taken back (the Exploitation Rule).
  if (c.holding && v.on_spot) return true;
  const absl::Duration slack = Slack(v, now);
  const absl::Duration net = v.margin * rules.safety_factor;
  // The safety net. (On on-demand the slack no longer shrinks: once it
  // fires, the job stays there.)
  if (slack < net) return false;
  const bool greedy = rules.rule == DeadlineSpotRules::Rule::kGreedy;
  // The line from (arrival, 0) to (deadline, work), at `t`.
  const absl::Duration span = v.deadline - v.arrival;
  auto line = [&](absl::Time t) {
    if (span <= absl::ZeroDuration()) return v.work;
    return v.work * std::clamp(absl::FDivDuration(t - v.arrival, span), 0.0, 1.0);
  };
  if (!v.on_spot) {  // on on-demand, or asking for it
    if (greedy || !c.spot_available) return false;
    // Hysteresis.
    return rules.hysteresis_factor <= 0 ||
           v.progress >= line(now + v.margin * rules.hysteresis_factor);
  }
  if (c.spot_available) return true;
  // Waiting for spot that is not there: on-demand when behind the line
  // (Uniform Progress), or when waiting until the next decision would leave
  // the job inside the net.
  if (!greedy && v.progress < line(now)) return false;
  return slack - c.next_decision >= net;
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
  bool capacity_limited = false;
  auto add_type = [&](const std::string& type) {
    const InstanceTypeModel& t = models.Type(type);
    capacity_limited = capacity_limited || t.capacity.has_value();
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
  const std::string& first_type =
      rc.instance_groups_size() > 0 ? rc.instance_groups(0).instance_type() : rc.instance_type();
  const absl::Duration notice = models.Type(first_type).spot_notice;
  // On-demand capacity that may run short: a capacity error and the
  // engine's first capacity retry, one round.
  const absl::Duration capacity =
      capacity_limited ? models.capacity_error_latency + absl::Seconds(30) : absl::ZeroDuration();
  return checkpoint_interval * WorstCasePace(models, request, attributes) + notice + retry_delay +
         capacity + provisioning + start + image + data + attributes.upload + absl::Seconds(5);
}

std::unique_ptr<SpotInterruptionHandler> NewDeadlineSpotHandler(DeadlineSpotOptions options) {
  return std::make_unique<DeadlineSpotHandler>(std::move(options));
}

}  // namespace kiln::sim
