// The omniscient bound of "Can't Be Late" (Wu et al., NSDI'24, Sec. 5.3.1):
// the least a deadline-bound job can cost on spot and on-demand when its
// whole spot trace is known in advance, in the paper's model. It shows where
// an online policy (greedy, Uniform Progress) sits between what it paid and
// the most any policy could have saved.
//
// The model: the job needs `work` of computation by `deadline` after
// `start`. Time runs in the trace's ticks; at each tick start the job holds
// nothing, spot (only when the trace has `instances` spot instances during
// that tick) or on-demand (always there). Each change to spot or on-demand
// costs `changeover` of time without progress, billed at the new capacity's
// price; going idle costs nothing; a tick without spot takes spot away at
// its start. Instances are billed while held, the last tick up to the end of
// the work. Durations count in whole `unit`s of the job (a minute, or less
// when the trace's ticks are not whole minutes): the work and the changeover
// rounded up, the deadline down.
//
// Threading: a pure function.
#ifndef KILN_SIM_IDEAL_H_
#define KILN_SIM_IDEAL_H_

#include <cstdint>
#include <optional>

#include "absl/time/time.h"
#include "kiln/sim/models.h"

namespace kiln::sim {

struct IdealJob {
  absl::Duration start;       // since the trace's first tick; not negative
  absl::Duration work;        // positive
  absl::Duration deadline;    // after start; positive
  absl::Duration changeover;  // not negative
  int32_t instances = 1;      // spot is there when the trace has this many
  // Prices of the job's instances, all of them, per hour.
  double spot_per_hour = 0;
  double on_demand_per_hour = 0;
};

// The least cost of `job` on `trace` (see the file comment), or nullopt when
// no schedule finishes the work by the deadline.
std::optional<double> IdealSpotCost(const SpotTrace& trace, const IdealJob& job);

// What the same job costs on on-demand from its start, in the same model:
// (work + changeover) at the on-demand price.
double IdealOnDemandCost(const IdealJob& job);

}  // namespace kiln::sim

#endif  // KILN_SIM_IDEAL_H_
