// CheckpointSync: keeps a local checkpoint directory and a store prefix in
// step, as the service does for CheckpointConfig (S3Uri <-> LocalPath):
// - Restore(), before the container starts (at the job's start and at every
//   restart): everything under the prefix is copied into the directory;
// - SyncOnce(), repeatedly while the container runs and once after it stops:
//   files that are new or changed since the last sync are uploaded, files
//   deleted locally are deleted from the store. Objects added to the store by
//   someone else after Restore() are not pulled down.
// Files are copied as they are (no compression); the relative path below the
// directory is the key below the prefix. One prefix may be shared by all the
// hosts of a job (scripts must use per-host file names).
// A file is uploaded as it is when SyncOnce looks: a file still being written
// can be uploaded half-written (and again once complete), so scripts should
// write a checkpoint under a temporary name and rename it, as the service
// advises. Regular files are synced; symbolic links, to files or directories,
// are skipped, never followed (a link could show the store a file from
// outside the directory); the object stores' own `.kiln-tmp-*` files are
// skipped both ways. The directory is walked down by file descriptor (a
// few at a time, however deep the tree) and each file uploaded from the
// descriptor it was opened as, so a link put in place of a directory while a
// sync runs is not followed either.
//
// Error messages begin with "checkpoint restore" or "checkpoint sync" (a
// caller can log them as they are), and show local paths, URIs and keys
// escaped and cut, as kiln::InputForMessage shows input (kiln/json.h; at most
// 1024 bytes of a path): keys are names the container chose.
//
// Used by backends that have real files (the local backend); the simulation
// backend models checkpoints instead.
//
// Threading: thread-compatible; every call blocks on file and store I/O, so
// call it from a worker thread.
#ifndef KILN_CHECKPOINT_SYNC_H_
#define KILN_CHECKPOINT_SYNC_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "kiln/clock.h"
#include "kiln/object_store.h"

namespace kiln {

// What one SyncOnce call did to the store.
struct CheckpointSyncStats {
  int uploaded = 0;
  int deleted = 0;
  int64_t bytes_uploaded = 0;
};

class CheckpointSync {
 public:
  // `store` must outlive this object. `prefix` is the CheckpointConfig.S3Uri
  // (a trailing '/' is added when missing); `local_dir` the LocalPath on this
  // host (created when missing).
  //
  // `trusted_root`, for a directory that someone else (a container) can
  // write to: empty, or `local_dir` itself or a directory above it. When set,
  // `trusted_root` is opened as named and every component of the path below
  // it down to `local_dir` with O_NOFOLLOW, so that a container that replaced
  // `local_dir` (or a directory on the way) by a symbolic link cannot make
  // the host read or write what the link points to: Restore and SyncOnce
  // then fail with FailedPrecondition naming the link, and touch nothing.
  // Without it `local_dir` is used as named, links on its path followed.
  //
  // `clock`: null (the default) for the system clock (CLOCK_REALTIME), which
  // the kernel stamps files with; else the time that modification times are
  // compared with (below), for tests that set those times. Must outlive this
  // object.
  CheckpointSync(ObjectStore& store, std::string prefix, std::string local_dir,
                 std::string trusted_root = {}, const Clock* clock = nullptr);

  // Copies every object under the prefix into the directory, replacing local
  // files of the same name (other local files stay and count as new), and
  // records them as in sync, forgetting what earlier calls recorded. Keys
  // ending in '/' (directory markers) are skipped; an object deleted between
  // the listing and its copy is skipped. Errors: from the store or the file
  // system, naming the object; InvalidArgument for an object key that is not
  // a clean relative path (absolute, "..", "." or empty segments), checked
  // for every key before anything is written, and so is InvalidArgument for
  // two objects that would need one path to be both a file and a directory
  // (`a` and `a/b`: S3 can hold both), naming both; FailedPrecondition when a
  // directory on the way to a file is a symbolic link (never written
  // through), or, with a trusted root, when one on the way to the directory
  // is; InvalidArgument when `local_dir` is not at or below `trusted_root`.
  // When it wrote a file, it returns no sooner than one timestamp tick of the
  // file system after the last write (see SyncOnce: 20 ms, or up to 2 s more
  // for whole-second stamps), so that a same-size rewrite the container makes
  // as soon as it starts gets a stamp of its own and is uploaded. A file the
  // store's write left stamped ahead of the clock is not waited for: the
  // first SyncOnce uploads it again.
  absl::Status Restore();

  // Uploads new and changed files (by size and modification time since the
  // last sync) and deletes from the store the files removed locally: only
  // keys this object restored or uploaded (or tried to, with a failure other
  // than InvalidArgument or NotFound: the store may have taken the object
  // before failing) are ever deleted. Deletions come after the uploads, so
  // that a crash during an upload leaves the store the checkpoint the new
  // file replaces, except for keys in the way of a new file: a file replaced
  // by a directory of its name, or a directory replaced by a file, has its
  // old keys deleted first and the new file(s) uploaded in the same call (so
  // that no sync leaves the store holding `a` and `a/b`, which Restore
  // refuses, a new file whose old keys could not be deleted waits for the
  // next call).
  // Returns OK, or the first error (naming the file, with the number of
  // others): the other files are still processed, and a failed file is
  // retried on the next call. Either way `*stats`, when not null, is set to
  // what the call did: on an error, the uploads and deletions that succeeded
  // before and after it, so that the caller knows what reached the store.
  // A folder below the directory that cannot be read (listed, or an entry
  // in it examined: EACCES, EMFILE, ...) does not stop the call: files
  // elsewhere are uploaded as usual, but no key at or below that folder is
  // deleted from the store (its files may still be there, unseen) and those
  // keys stay recorded as synced; the call then returns the error (code from
  // errno, e.g. PermissionDenied) naming the folder. When the directory
  // itself cannot be listed that means nothing is uploaded or deleted; so it
  // is, with a trusted root, when the directory or one on the way to it is
  // a symbolic link (FailedPrecondition naming it) or when `local_dir` is not
  // at or below `trusted_root` (InvalidArgument). A file that is gone, or has
  // become a link, when its turn to upload comes counts as removed. A file
  // modified within one timestamp tick of the file system before the call
  // is uploaded again by the next call, since a rewrite in the same tick
  // would keep its size and modification time. The tick is bounded from the
  // stamp itself, whatever the file system: 20 ms (the kernel's clock) for a
  // fine stamp, more for a round one: 1 s more for a whole second (ext3,
  // HFS+, some NFS servers), 2 s more for an even second (FAT). A file
  // stamped after the call began (a file server's clock ahead of this
  // host's, a stamp set by hand) counts the same: it is uploaded by every
  // call until the clock has passed its stamp.
  absl::Status SyncOnce(CheckpointSyncStats* stats = nullptr);

 private:
  struct Stamp {
    int64_t size = 0;
    int64_t mtime_ns = 0;
  };
  ObjectStore& store_;
  std::string prefix_;
  std::string local_dir_;
  std::string trusted_root_;  // empty: none
  const Clock* clock_;        // null: CLOCK_REALTIME
  // Relative path -> state last uploaded or restored; size -1: to upload
  // again (a racy stamp, or a failed upload that may have stored the object).
  std::map<std::string, Stamp> synced_;
};

}  // namespace kiln

#endif  // KILN_CHECKPOINT_SYNC_H_
