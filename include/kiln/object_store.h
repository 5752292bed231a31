// ObjectStore: list, get, put and delete objects named by URI. Data channels
// read their sources through it, checkpoints are synced through it, and model
// artifacts are uploaded through it.
//
// Implementations: NewFileObjectStore (file:// URIs: a local directory tree),
// NewInMemoryObjectStore (tests and simulation), and the AWS backend's S3
// store (s3://). ObjectStores routes a URI to the store registered for its
// scheme.
//
// URIs: `<scheme>://<authority>/<key>`; for file:// the path is absolute
// (file:///data/train/part-0). A prefix lists every object whose URI starts
// with it (no delimiter semantics): file:///data/train/ lists the tree below.
// Errors name URIs and local paths escaped and cut, as kiln::InputForMessage
// shows input (kiln/json.h; at most 1024 bytes of a path): keys are input.
//
// Threading: every method is thread-safe and may block (I/O): call it from a
// worker thread, never from an engine's loop thread (the in-memory store, which
// never blocks, is the exception the simulation backend relies on).
#ifndef KILN_OBJECT_STORE_H_
#define KILN_OBJECT_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kiln {

struct ObjectInfo {
  std::string uri;   // the object's full URI
  int64_t size = 0;  // bytes
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // Returns the objects whose URI starts with `prefix`, sorted by URI.
  // Errors: InvalidArgument for a URI this store does not serve;
  // Unavailable for a transient failure (retry); others as the store says.
  // An empty result is OK.
  virtual absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) = 0;

  // Returns the first `max_objects` (at least 1) objects, by URI, of those
  // List(prefix) returns: the bounded look a check needs. A prefix has objects
  // when ListFirst(prefix, 1) is not empty, and an object exists when
  // ListFirst(uri, 1) returns it (an object sorts before every other URI it
  // is a prefix of). Errors: InvalidArgument for max_objects < 1; otherwise
  // as for List. The S3 store sends one ListObjectsV2 with max-keys (a page
  // per 1000), the in-memory store stops at the last one. Default (the file
  // store too): List, then the first `max_objects`.
  virtual absl::StatusOr<std::vector<ObjectInfo>> ListFirst(std::string_view prefix,
                                                            int64_t max_objects);

  // Returns the whole object. Errors: NotFound when it does not exist;
  // InvalidArgument, Unavailable as for List.
  virtual absl::StatusOr<std::string> Get(std::string_view uri) = 0;

  // Stores `data` as the object, replacing any previous one. Atomic for
  // readers: they see the old object or the new one, never a part.
  // Errors: InvalidArgument, Unavailable; ResourceExhausted when the store is
  // full (e.g. a full disk).
  virtual absl::Status Put(std::string_view uri, std::string_view data) = 0;

  // Removes the object. Deleting an object that does not exist is OK.
  virtual absl::Status Delete(std::string_view uri) = 0;

  // Streams the object to `sink` in consecutive non-empty chunks, in order
  // (none for an empty object); a sink error stops the read and is returned.
  // Errors as for Get. The chunk is valid only during the call. The file and
  // in-memory stores send chunks of at most 1 MiB. Default: one Get, one chunk.
  virtual absl::Status Read(std::string_view uri,
                            absl::FunctionRef<absl::Status(std::string_view chunk)> sink);

  // Returns bytes [offset, offset + length) of the object, fewer when the
  // object ends first: empty when `offset` is at or past its end. Lazily read
  // views (the local backend's FastFile over s3://) read through it, so a
  // store should read only the range. Errors: InvalidArgument for a negative
  // offset or length; otherwise as for Get. The file store preads, the
  // in-memory store copies the range, the S3 store sends a ranged GET.
  // Default: one Get, then the range of it (the whole object is read).
  virtual absl::StatusOr<std::string> ReadRange(std::string_view uri, int64_t offset,
                                                int64_t length);

  // Copies the object into the local file `path` (created or replaced
  // atomically through a temporary file beside it; parent directories
  // created). The copy is not fsync'ed: it is scratch data that can be
  // fetched again. Errors: NotFound for a missing object; file system errors
  // name `path` (ResourceExhausted for a full disk); a failure leaves `path`
  // as it was. Default: Get, then write.
  virtual absl::Status GetToFile(std::string_view uri, const std::string& path);

  // Stores the local file `path` as the object. Errors: NotFound (naming
  // `path`) when the local file does not exist or is not a regular file;
  // otherwise as for Put. Default: read, then Put.
  virtual absl::Status PutFromFile(std::string_view uri, const std::string& path);

  // For readers that use a store's local files in place rather than through
  // the store (the local backend's FastFile links and Pipe splices): the
  // local path that `uri` (an object or a prefix) names, with the symbolic
  // links of the part of it that exists resolved, after the checks the store
  // makes on every call (a confined file store's roots). Errors:
  // Unimplemented when the store keeps no local files (the caller then reads
  // through the store); PermissionDenied outside a confined store's roots;
  // InvalidArgument as for List. Default: Unimplemented.
  virtual absl::StatusOr<std::string> LocalPath(std::string_view uri);
};

// Objects in a local directory tree, for file:// URIs with an absolute path
// (file:///dir/name); any other URI is InvalidArgument naming it, and so is an
// object URI ending in '/'. Put and PutFromFile write a temporary file
// `.kiln-tmp-<random>` beside the target (creating parent directories), fsync
// it and rename it over, so a crash never leaves half an object, then fsync
// the directory (and those it created), so that an object Put returned OK
// for survives a crash; on failure before the rename the temporary file is
// removed (a full disk is ResourceExhausted naming the path), and a failure
// to sync a directory after it says the object is in place but may not
// survive a crash. A writer holds a flock on its temporary file until the
// rename; the first Put or PutFromFile of a store into a directory removes
// the temporary files there that no writer holds (those a killed process
// left). PutFromFile and GetToFile copy the holes of a sparse file as holes.
// List walks the tree below the prefix: regular files and symbolic links to
// them, never into linked directories, never the temporary files. A
// symbolic link is followed only when its target lies inside the listed
// prefix's folder (the prefix up to its last '/', its own links resolved):
// one leading out of it fails the listing with PermissionDenied naming the
// link and the folder (a link to nothing is skipped, as before), so a link
// planted in a source folder never brings a file from elsewhere into a job.
// Get and the other reads of a single object follow its links.
// A directory is not an object: Get says NotFound, Delete does nothing.
// Removing the last object of a directory leaves the directory; a Put or
// PutFromFile of that directory's own key replaces it while it is empty (the
// key can be an object again, as on S3), and fails while it holds anything.
// LocalPath returns the URI's path (links of its existing part resolved).
std::unique_ptr<ObjectStore> NewFileObjectStore();

struct FileObjectStoreOptions {
  // Directories (absolute paths) the store is confined to; empty: the whole
  // file system, as far as this process may read and write it. When set,
  // every URI a call names (the object read, written or deleted, the listed
  // prefix's folder, LocalPath's URI) must lead, once the symbolic links on
  // its way are resolved, to a path inside one of them, or the call fails
  // with PermissionDenied naming the URI and the roots, before anything is
  // read, written or created; a URI with a '.' or '..' segment is
  // InvalidArgument. A read is checked again on the file it opened, and a
  // write on the directory it renames into, so a link swapped in meanwhile
  // reaches nothing outside (that check reads /proc/self/fd: without /proc a
  // confined store's reads and writes fail). A hard link inside a root to a
  // file elsewhere cannot be told from the file itself: the roots must not
  // hold any.
  std::vector<std::string> allowed_roots;
};

// NewFileObjectStore confined to `options.allowed_roots`. Errors:
// InvalidArgument naming a root that is not an absolute path to an existing
// directory (each is resolved once, here: a root that is a link means its
// target).
absl::StatusOr<std::unique_ptr<ObjectStore>> NewFileObjectStore(FileObjectStoreOptions options);

// Objects in memory, for any scheme (tests, simulation); a URI without
// `<scheme>://` is InvalidArgument. Never blocks.
std::unique_ptr<ObjectStore> NewInMemoryObjectStore();

// Routes URIs to stores by scheme. The stores are borrowed and must outlive
// it. Thread-safe.
class ObjectStores {
 public:
  // Serves `scheme` ("file", "s3", "mem") with `store`, replacing any store
  // registered for it; a null `store` unregisters the scheme. Schemes match
  // exactly (case-sensitive).
  void Register(std::string scheme, ObjectStore* store);

  // The store for the URI's scheme. Errors: InvalidArgument when the URI has no
  // scheme, or FailedPrecondition when no store is registered for it (the
  // message names the scheme).
  absl::StatusOr<ObjectStore*> For(std::string_view uri) const;

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, ObjectStore*, std::less<>> stores_;
};

}  // namespace kiln

#endif  // KILN_OBJECT_STORE_H_
