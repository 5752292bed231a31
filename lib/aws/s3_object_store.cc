// S3ObjectStore: s3:// URIs over S3Client (see include/kiln/aws/s3.h), the
// factory, option resolution and the CreateTrainingJob channel check.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "aws/internal/aws_config.h"
#include "aws/internal/s3_client.h"
#include "kiln/aws/s3.h"
#include "kiln/object_store.h"
#include "kiln/plugin/files.h"
#include "kiln/plugin/json_value.h"
#include "kiln/plugin/object_store_checks.h"
#include "kiln/plugin/status_macros.h"
#include "kiln/plugin/worker_pool.h"

namespace kiln::aws {
namespace {

using internal::S3Client;
using ::kiln::ErrnoError;
using ::kiln::MakeDirs;
using ::kiln::PathForMessage;

constexpr int64_t kMinPartSize = int64_t{5} << 20;
constexpr int64_t kMaxPartSize = int64_t{5} << 30;
constexpr int64_t kMaxParts = 10000;

struct S3Location {
  std::string bucket;
  std::string key;
};

// s3://bucket/key -> (bucket, key). The key may be empty only when
// `allow_empty_key` (a prefix).
absl::StatusOr<S3Location> ParseS3Uri(std::string_view uri, bool allow_empty_key) {
  constexpr std::string_view kScheme = "s3://";
  if (uri.substr(0, kScheme.size()) != kScheme) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", PathForMessage(uri), "' is not an s3:// URI (s3://bucket/key)"));
  }
  std::string_view rest = uri.substr(kScheme.size());
  size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = std::string(rest.substr(0, slash));
  if (slash != std::string_view::npos) loc.key = std::string(rest.substr(slash + 1));
  if (loc.bucket.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("'", PathForMessage(uri), "' names no bucket"));
  }
  if (!allow_empty_key && (loc.key.empty() || loc.key.back() == '/')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", PathForMessage(uri), "' names no object (empty key or a key ending in '/')"));
  }
  return loc;
}



absl::Status PwriteAll(int fd, std::string_view data, int64_t offset, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::pwrite(fd, data.data(), data.size(), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat("write '", PathForMessage(path), "'"));
    }
    data.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return absl::OkStatus();
}

absl::Status PreadAll(int fd, char* buf, size_t len, int64_t offset, const std::string& path) {
  while (len > 0) {
    ssize_t n = ::pread(fd, buf, len, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, absl::StrCat("read '", PathForMessage(path), "'"));
    }
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat("read '", PathForMessage(path), "': the file shrank while uploading"));
    }
    buf += n;
    len -= static_cast<size_t>(n);
    offset += n;
  }
  return absl::OkStatus();
}

// A temporary file beside `path`, removed unless Commit() renamed it over.
class TempFile {
 public:
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!name_.empty()) ::unlink(name_.c_str());
  }
  absl::Status Create(const std::string& path) {
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
    KILN_RETURN_IF_ERROR(MakeDirs(dir));
    std::string pattern = absl::StrCat(dir, "/.kiln-tmp-XXXXXX");
    int fd = ::mkstemp(pattern.data());
    if (fd < 0) {
      return ErrnoError(errno,
                        absl::StrCat("create a temporary file in '", PathForMessage(dir), "'"));
    }
    // (mkstemp's 0600 otherwise. Cannot fail on a file this process just made
    // and owns, and the file stays readable by its owner if it did.)
    ::fchmod(fd, 0644);
    fd_ = fd;
    name_ = pattern;
    return absl::OkStatus();
  }
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  absl::Status Commit(const std::string& path) {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      return ErrnoError(errno, absl::StrCat("write '", PathForMessage(path), "'"));
    }
    if (::rename(name_.c_str(), path.c_str()) != 0) {
      return ErrnoError(errno, absl::StrCat("rename into '", PathForMessage(path), "'"));
    }
    name_.clear();
    return absl::OkStatus();
  }

 private:
  int fd_ = -1;
  std::string name_;
};

// Prefixes `status`'s message with the object's URI (as shown), keeping the
// code.
absl::Status Named(const absl::Status& status, std::string_view uri) {
  if (status.ok()) return status;
  const std::string shown = PathForMessage(uri);
  if (absl::StrContains(status.message(), shown)) return status;
  return absl::Status(status.code(), absl::StrCat(shown, ": ", status.message()));
}

class S3ObjectStore final : public ObjectStore {
 public:
  explicit S3ObjectStore(S3Options options)
      : options_(options), client_(ClientOptions(options)), pool_(options.max_concurrency) {}

  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    return ListUpTo(prefix, std::numeric_limits<int64_t>::max());
  }

  absl::StatusOr<std::vector<ObjectInfo>> ListFirst(std::string_view prefix,
                                                    int64_t max_objects) override {
    KILN_RETURN_IF_ERROR(kiln::CheckMaxObjects(prefix, max_objects));
    return ListUpTo(prefix, max_objects);
  }

  absl::StatusOr<std::string> Get(std::string_view uri) override {
    KILN_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri, false));
    std::string data;
    auto append = [&](std::string_view chunk) {
      data.append(chunk);
      return absl::OkStatus();
    };
    const internal::BodySink sink = append;
    KILN_RETURN_IF_ERROR(client_.GetObject(loc.bucket, loc.key, 0, -1, "", sink).status());
    return data;
  }

  absl::Status Put(std::string_view uri, std::string_view data) override {
    KILN_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri, false));
    const int64_t size = static_cast<int64_t>(data.size());
    if (size <= options_.multipart_threshold) return client_.PutObject(loc.bucket, loc.key, data);
    return Multipart(loc, uri, size, [&](int64_t offset, int64_t len, std::string& buf) {
      buf.assign(data.substr(offset, len));
      return absl::OkStatus();
    });
  }

  absl::Status Delete(std::string_view uri) override {
    KILN_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri, false));
    return client_.DeleteObject(loc.bucket, loc.key);
  }

  absl::Status Read(std::string_view uri,
                    absl::FunctionRef<absl::Status(std::string_view chunk)> sink) override {
    KILN_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri, false));
    auto forward = [&](std::string_view chunk) {
      return chunk.empty() ? absl::OkStatus() : sink(chunk);
    };
    const internal::BodySink body_sink = forward;
    return client_.GetObject(loc.bucket, loc.key, 0, -1, "", body_sink).status();
  }

  // One ranged GET. A range past the end (416) is an empty result, as is a
  // zero length (no request).
  absl::StatusOr<std::string> ReadRange(std::string_view uri, int64_t offset,
                                        int64_t length) override {
    KILN_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri, false));
    KILN_RETURN_IF_ERROR(kiln::CheckRange(uri, offset, length));
    if (length == 0) return std::string();
    std::string data;
    auto append = [&](std::string_view chunk) {
      data.append(chunk);
      return absl::OkStatus();
    };
    const internal::BodySink sink = append;
    absl::StatusOr<internal::S3ObjectMeta> meta =
        client_.GetObject(loc.bucket, loc.key, offset, offset + length - 1, "", sink);
    if (absl::IsOutOfRange(meta.status())) return std::string();
    KILN_RETURN_IF_ERROR(meta.status());
    if (static_cast<int64_t>(data.size()) > length) data.resize(static_cast<size_t>(length));
    return data;
  }

  absl::Status GetToFile(std::string_view uri, const std::string& path) override {
    KILN_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri, false));
    TempFile tmp;
    KILN_RETURN_IF_ERROR(tmp.Create(path));
    const int fd = tmp.fd();
    const int64_t part = options_.part_size;
    // The first part tells the size and the ETag that pins the other parts.
    int64_t offset = 0;
    auto write_first = [&](std::string_view chunk) -> absl::Status {
      KILN_RETURN_IF_ERROR(PwriteAll(fd, chunk, offset, path));
      offset += static_cast<int64_t>(chunk.size());
      return absl::OkStatus();
    };
    const internal::BodySink first_sink = write_first;
    absl::StatusOr<internal::S3ObjectMeta> meta =
        client_.GetObject(loc.bucket, loc.key, 0, part - 1, "", first_sink);
    if (absl::IsOutOfRange(meta.status()) && offset == 0) {
      // S3 refuses any range of an empty object: read it whole.
      meta = client_.GetObject(loc.bucket, loc.key, 0, -1, "", first_sink);
    }
    if (!meta.ok()) return meta.status();
    if (meta->size > part) {
      TaskGroup group(pool_);
      const std::string etag = meta->etag;
      for (int64_t start = part; start < meta->size; start += part) {
        const int64_t last = std::min(meta->size, start + part) - 1;
        group.Run([this, &loc, &path, &group, fd, start, last, etag]() -> absl::Status {
          if (group.failed()) return absl::OkStatus();
          int64_t at = start;
          auto write = [&](std::string_view chunk) -> absl::Status {
            KILN_RETURN_IF_ERROR(PwriteAll(fd, chunk, at, path));
            at += static_cast<int64_t>(chunk.size());
            return absl::OkStatus();
          };
          const internal::BodySink sink = write;
          return client_.GetObject(loc.bucket, loc.key, start, last, etag, sink).status();
        });
      }
      KILN_RETURN_IF_ERROR(group.Wait());
    }
    return tmp.Commit(path);
  }

  absl::Status PutFromFile(std::string_view uri, const std::string& path) override {
    KILN_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(uri, false));
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      return err == ENOENT
                 ? absl::NotFoundError(absl::StrCat("'", PathForMessage(path), "' does not exist"))
                 : ErrnoError(err, absl::StrCat("open '", PathForMessage(path), "'"));
    }
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      return ErrnoError(errno, absl::StrCat("stat '", PathForMessage(path), "'"));
    }
    if (!S_ISREG(st.st_mode)) {
      return absl::NotFoundError(
          absl::StrCat("'", PathForMessage(path), "' is not a regular file"));
    }
    const int64_t size = st.st_size;
    if (size <= options_.multipart_threshold) {
      std::string data(static_cast<size_t>(size), '\0');
      KILN_RETURN_IF_ERROR(PreadAll(fd, data.data(), data.size(), 0, path));
      return client_.PutObject(loc.bucket, loc.key, data);
    }
    return Multipart(loc, uri, size, [&](int64_t offset, int64_t len, std::string& buf) {
      buf.resize(static_cast<size_t>(len));
      return PreadAll(fd, buf.data(), buf.size(), offset, path);
    });
  }

 private:
  // Pages through ListObjectsV2 until the listing ends or `max_objects` are
  // in hand. S3 returns keys in UTF-8 binary order, so the first pages hold
  // the first objects; a page asks for no more than are still wanted.
  absl::StatusOr<std::vector<ObjectInfo>> ListUpTo(std::string_view prefix, int64_t max_objects) {
    KILN_ASSIGN_OR_RETURN(S3Location loc, ParseS3Uri(prefix, /*allow_empty_key=*/true));
    std::vector<ObjectInfo> out;
    std::string token;
    do {
      const int64_t wanted = max_objects - static_cast<int64_t>(out.size());
      const int32_t page_size = static_cast<int32_t>(
          std::min<int64_t>(options_.list_page_size, wanted));
      KILN_ASSIGN_OR_RETURN(internal::S3ListPage page,
                            client_.ListObjectsV2(loc.bucket, loc.key, token, page_size));
      for (auto& e : page.objects) {
        if (static_cast<int64_t>(out.size()) == max_objects) break;
        out.push_back({absl::StrCat("s3://", loc.bucket, "/", e.key), e.size});
      }
      token = page.truncated ? page.next_token : "";
    } while (!token.empty() && static_cast<int64_t>(out.size()) < max_objects);
    std::sort(out.begin(), out.end(),
              [](const ObjectInfo& a, const ObjectInfo& b) { return a.uri < b.uri; });
    return out;
  }

  static internal::S3ClientOptions ClientOptions(const S3Options& o) {
    internal::S3ClientOptions c;
    c.endpoint = o.endpoint_url;
    c.region = o.region;
    c.credentials = {o.credentials->access_key_id, o.credentials->secret_access_key,
                     o.credentials->session_token};
    c.path_style = o.addressing_style == S3AddressingStyle::kPath;
    c.max_attempts = o.max_attempts;
    c.retry_base_delay = o.retry_base_delay;
    c.retry_max_delay = o.retry_max_delay;
    c.seed = o.seed;
    c.http.connect_timeout = o.connect_timeout;
    c.http.stall_timeout = o.stall_timeout;
    return c;
  }

  // A multipart upload of `size` bytes; `fill(offset, len, buf)` puts a
  // part's bytes in `buf`. Aborts the upload on any failure.
  template <typename Fill>
  absl::Status Multipart(const S3Location& loc, std::string_view uri, int64_t size, Fill fill) {
    const int64_t part = std::max(options_.part_size, (size + kMaxParts - 1) / kMaxParts);
    const int64_t parts = (size + part - 1) / part;
    KILN_ASSIGN_OR_RETURN(std::string upload_id,
                          client_.CreateMultipartUpload(loc.bucket, loc.key));
    std::vector<std::string> etags(static_cast<size_t>(parts));
    absl::Status status;
    {
      TaskGroup group(pool_);
      for (int64_t i = 0; i < parts; ++i) {
        group.Run([&, i]() -> absl::Status {
          const int64_t offset = i * part;
          std::string buf;
          KILN_RETURN_IF_ERROR(fill(offset, std::min(part, size - offset), buf));
          KILN_ASSIGN_OR_RETURN(etags[static_cast<size_t>(i)],
                                client_.UploadPart(loc.bucket, loc.key, upload_id,
                                                   static_cast<int>(i + 1), buf));
          return absl::OkStatus();
        });
      }
      status = group.Wait();
    }
    if (status.ok()) {
      status = client_.CompleteMultipartUpload(loc.bucket, loc.key, upload_id, etags);
    }
    if (!status.ok()) {
      // Best effort: the upload's parts would otherwise be kept (and billed).
      client_.AbortMultipartUpload(loc.bucket, loc.key, upload_id).IgnoreError();
      return Named(status, uri);
    }
    return absl::OkStatus();
  }

  const S3Options options_;
  S3Client client_;
  WorkerPool pool_;
};

}  // namespace

absl::StatusOr<S3Options> ResolveS3Options(S3Options options) {
  return internal::ResolveS3OptionsWith(std::move(options), [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  });
}

absl::StatusOr<std::unique_ptr<ObjectStore>> NewS3ObjectStore(S3Options options) {
  if (!options.credentials.has_value() || options.credentials->access_key_id.empty() ||
      options.credentials->secret_access_key.empty()) {
    return absl::InvalidArgumentError(
        "S3 store: no credentials (resolve the options with ResolveS3Options, or set them)");
  }
  if (options.region.empty()) return absl::InvalidArgumentError("S3 store: no region");
  if (!absl::StartsWith(options.endpoint_url, "http://") &&
      !absl::StartsWith(options.endpoint_url, "https://")) {
    return absl::InvalidArgumentError(absl::StrCat("S3 store: endpoint_url '",
                                                   PathForMessage(options.endpoint_url),
                                                   "' must start with http:// or https://"));
  }
  if (options.part_size < kMinPartSize || options.part_size > kMaxPartSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "S3 store: part_size ", options.part_size, " must be between 5 MiB and 5 GiB"));
  }
  if (options.max_concurrency < 1) {
    return absl::InvalidArgumentError("S3 store: max_concurrency must be at least 1");
  }
  if (options.list_page_size < 1 || options.list_page_size > 1000) {
    return absl::InvalidArgumentError("S3 store: list_page_size must be between 1 and 1000");
  }
  if (options.addressing_style == S3AddressingStyle::kAuto) {
    options.addressing_style = S3AddressingStyle::kVirtual;
  }
  return std::unique_ptr<ObjectStore>(new S3ObjectStore(std::move(options)));
}

}  // namespace kiln::aws
