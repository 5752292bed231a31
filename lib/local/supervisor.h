// The supervisor of one container run: the thread that takes a run from its
// spec to its exit, in steps (Supervise). It knows nothing of the engine or
// the event loop: what it learns goes to a RunReporter, which the provider
// implements by posting to its loop (and a host agent could implement by
// sending it elsewhere).
//
// Internal to kiln::local: never installed.
#ifndef KILN_LIB_LOCAL_SUPERVISOR_H_
#define KILN_LIB_LOCAL_SUPERVISOR_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kiln/cluster_provider.h"
#include "local/container_runtime.h"
#include "local/view_registry.h"

namespace kiln::local::internal {

// What a supervisor says about its run. Called on the supervisor thread, in
// this order: OnLines any number of times, OnStarted exactly once (OK: the
// container runs; else why it could not start), OnLines again, then OnExit
// at most once (never for a run that could not start, nor for one cancelled
// by KillProc(proc, /*cancel=*/true)).
class RunReporter {
 public:
  virtual ~RunReporter() = default;
  virtual void OnStarted(absl::Status status) = 0;
  // Lines for observers: the container's output (without the newline) and
  // Kiln's own, prefixed "[kiln] ", in order.
  virtual void OnLines(std::vector<std::string> lines) = 0;
  virtual void OnExit(ContainerExit exit) = 0;
};

// Runs `spec` on `runtime` to its end: waits until the instance's earlier
// runs are done with its files, makes the tree ready, attaches the channels'
// read-only views (those of `views` below the instance), restores
// checkpoints, starts the container, reads its output into the log stream
// and to `reporter` while syncing checkpoints, reaps it, reads its failure
// file, syncs checkpoints a last time, and reports the exit. Notifies
// `proc.finished` last. Blocking: on a thread of its own. `runtime`, `views`,
// `proc` and `reporter` must outlive the call.
void Supervise(const ContainerRuntime& runtime, const ViewRegistry& views, RunSpec spec,
               ContainerProc& proc, RunReporter& reporter);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_SUPERVISOR_H_
