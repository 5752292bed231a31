// The instance tree: an instance of the local backend is the directory
// <state_dir>/instances/<cluster-id>/<host> (internal/layout.h) holding
//   ml/           the container's /opt/ml tree
//   tmp/          scratch space (TMPDIR; /tmp under bwrap)
//   image-cache/  the instance's image (image_cache.h)
//   checkpoints-local/  the checkpoint directory of a job whose
//                 CheckpointConfig.LocalPath is outside /opt/ml (bwrap only)
//   views/        the read-only views the data channel published (view_registry.h)
// and how it is made, made fresh between jobs, and handed to the container
// user.
//
// Every path a run could have changed (below ml/ and tmp/) is reached below
// the instance directory by file descriptor, never through a link the
// container planted (internal/fs.h's *Below functions).
//
// Internal to kiln::local: never installed. Thread-safe (no shared state).
#ifndef KILN_LIB_LOCAL_INSTANCE_TREE_H_
#define KILN_LIB_LOCAL_INSTANCE_TREE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "local/internal/container_config.h"
#include "local/internal/spawn.h"
#include "local/log_stream.h"

namespace kiln::local::internal {

// Where the container sees its tree and its program.
inline constexpr char kContainerBase[] = "/opt/ml";
inline constexpr char kContainerProgram[] = "/opt/program";
inline constexpr char kDefaultCheckpointPath[] = "/opt/ml/checkpoints";
// The instance's scratch directory, below its directory (TMPDIR; /tmp under bwrap).
inline constexpr char kInstanceTmp[] = "tmp";

// Whether the container path `path` is /opt/ml or below it.
bool IsUnderContainerBase(std::string_view path);

// The host paths of one instance.
struct InstancePaths {
  std::string dir;      // <state_dir>/instances/<cluster-id>/<host>
  std::string ml_dir;   // dir/ml: the /opt/ml tree
  std::string tmp_dir;  // dir/tmp
  // The paths of the instance `instance_id` ("<cluster-id>/<host>").
  static InstancePaths Of(std::string_view state_dir, std::string_view instance_id);
};

// Makes the directories of a new instance: its image cache, its scratch
// space and its empty /opt/ml tree. Errors: the file system's, naming the
// path.
absl::Status MakeInstanceTree(const InstancePaths& paths);

// An instance's tree being made fresh ahead of its next job (Recycle).
struct Scrub {
  absl::Notification done;  // the fresh tree is in place (or `status` says why not)
  absl::Status status;      // set before `done`
  absl::Notification trash_gone;  // the old tree is deleted too
};

// Makes an instance's /opt/ml tree, scratch space and view registry anew
// (nothing of an earlier job survives; the image cache stays). The old ones are renamed
// aside, into `trash` (paths inside the instance directory), so that the
// caller can delete them after the fresh tree is in use (EmptyTrash): a
// rename is O(1), deleting a job's files is not.
absl::Status FreshInstanceTree(const InstancePaths& paths, std::vector<std::string>& trash);

// Deletes what FreshInstanceTree put aside, the files of the run `run`, and
// says in its log stream what could not be deleted (the first removal that
// failed; the others are tried all the same).
void EmptyTrash(const std::shared_ptr<RunLog>& run, std::vector<std::string>& trash);

// Makes the tree ready for a run: empties `fresh_dirs` (paths below the
// instance directory: a run may have planted links there, which are
// replaced, never followed), writes the config files of `config` to
// input/config (made anew too), and makes the directory of each of its
// channels below input/data. Errors: the file system's, naming the path.
absl::Status PrepareRunTree(const InstancePaths& paths, const std::vector<std::string>& fresh_dirs,
                            const ContainerConfig& config);

// Gives the container user `user` what a run may write: the /opt/ml tree's
// directories, model, output, code and checkpoints, the entries of
// input/data (FIFOs, channel folders) and input/config, the scratch space,
// and `checkpoint_dir` (a host path below the instance directory; "" for
// none). The channels' files stay the host's: read-only to the container.
absl::Status GiveTreeToContainer(const std::string& instance_dir,
                                 const std::string& checkpoint_dir, const Credentials& user);

}  // namespace kiln::local::internal

#endif  // KILN_LIB_LOCAL_INSTANCE_TREE_H_
