#include "local/internal/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {
namespace {

// Archive paths, entry names (an image tarball's, a container's files) and
// libarchive's text, which quotes them, as the messages show them.
using ::kiln::PathForMessage;

struct ReadCloser {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct WriteCloser {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
using ReadArchivePtr = std::unique_ptr<struct archive, ReadCloser>;
using WriteArchivePtr = std::unique_ptr<struct archive, WriteCloser>;

// libarchive's error text, escaped and cut as a path: it often quotes the
// entry's path.
std::string ArchiveError(struct archive* a) {
  const char* e = archive_error_string(a);
  return e != nullptr ? PathForMessage(e) : "unknown error";
}

// An entry name made relative: "./a/b/" -> "a/b". Empty for the top directory.
std::string NormalizeEntryName(std::string_view name) {
  while (name.substr(0, 2) == "./") name.remove_prefix(2);
  while (!name.empty() && name.back() == '/') name.remove_suffix(1);
  if (name == ".") return "";
  return std::string(name);
}

// Where WriteTar's archive goes: its own write callback rather than
// archive_write_open_fd, so that a failed write keeps its errno. libarchive
// would report it as "Write error", or, from the gzip filter's close, as
// "Failed to clean up compressor" with no errno at all, and a full disk would
// not say so.
struct FdSink {
  int fd = -1;
  int error = 0;  // errno of the first failed write
};

la_ssize_t WriteToSink(struct archive* a, void* client, const void* buf, size_t n) {
  FdSink& sink = *static_cast<FdSink*>(client);
  size_t done = 0;
  while (done < n) {
    const ssize_t w = write(sink.fd, static_cast<const char*>(buf) + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      const int err = errno;
      if (sink.error == 0) sink.error = err;
      archive_set_error(a, err, "%s", std::strerror(err));
      return -1;
    }
    done += static_cast<size_t>(w);
  }
  return static_cast<la_ssize_t>(n);
}

// The status of a failed libarchive call of WriteTar: the write's own error
// when the output could not be written (a full disk is ResourceExhausted
// naming the archive), else Internal with libarchive's message after
// `context`.
absl::Status WriteFailure(struct archive* a, const FdSink& sink, const std::string& out_name,
                          const std::string& context) {
  if (sink.error != 0) return ErrnoStatus(sink.error, "write", out_name);
  return absl::InternalError(absl::StrCat(context, ArchiveError(a)));
}

ReadArchivePtr OpenForRead(const std::string& path, absl::Status& status) {
  ReadArchivePtr a(archive_read_new());
  archive_read_support_filter_all(a.get());
  archive_read_support_format_all(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK) {
    status = absl::InvalidArgumentError(
        absl::StrCat("cannot read archive '", PathForMessage(path), "': ", ArchiveError(a.get())));
    return nullptr;
  }
  return a;
}

// One entry of the merged trees: which root it comes from, and its lstat.
struct Source {
  size_t root = 0;
  struct stat st;
};

// The trees of WriteTar's roots, open and listed.
struct MergedTrees {
  std::vector<UniqueFd> root_fds;  // invalid for a root that does not exist
  std::map<std::string, Source> entries;
  std::vector<LeftOut> left_out;  // what is neither a file, a directory nor a link
};

std::string Below(const TreeRoot& root, const std::string& rel) {
  return rel.empty() ? root.display : absl::StrCat(root.display, "/", rel);
}

// Adds what is below the directory open as `dir_fd` (`rel` below its root) to
// `out`, walking down by file descriptor: nothing is followed.
absl::Status Collect(int dir_fd, const std::string& rel, size_t root, const TreeRoot& tree,
                     std::map<std::string, Source>& out, std::vector<LeftOut>& left_out) {
  absl::StatusOr<std::vector<std::string>> names = NamesAt(dir_fd, Below(tree, rel));
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    const std::string child_rel = rel.empty() ? name : absl::StrCat(rel, "/", name);
    Source src;
    src.root = root;
    if (fstatat(dir_fd, name.c_str(), &src.st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      return ErrnoStatus(errno, "stat", Below(tree, child_rel));
    }
    const bool is_dir = S_ISDIR(src.st.st_mode);
    if (!is_dir && !S_ISREG(src.st.st_mode) && !S_ISLNK(src.st.st_mode)) {
      left_out.push_back(LeftOut{root, Below(tree, child_rel)});
      continue;
    }
    out[child_rel] = src;
    if (!is_dir) continue;
    UniqueFd child(openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!child.valid()) {
      // Removed, or replaced by a link, meanwhile: its contents are not read.
      if (errno == ENOENT || errno == ELOOP || errno == ENOTDIR) continue;
      return ErrnoStatus(errno, "open directory", Below(tree, child_rel));
    }
    absl::Status s = Collect(child.get(), child_rel, root, tree, out, left_out);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<MergedTrees> OpenTrees(const std::vector<TreeRoot>& roots) {
  MergedTrees trees;
  for (size_t i = 0; i < roots.size(); ++i) {
    absl::StatusOr<UniqueFd> fd = OpenDirBelow(roots[i].base, roots[i].rel, roots[i].display);
    if (!fd.ok()) {
      if (!absl::IsNotFound(fd.status())) return fd.status();
      trees.root_fds.emplace_back();  // no such tree: nothing from it
      continue;
    }
    absl::Status s = Collect(fd->get(), "", i, roots[i], trees.entries, trees.left_out);
    if (!s.ok()) return s;
    trees.root_fds.push_back(*std::move(fd));
  }
  return trees;
}

// Opens the regular file `rel` below the root open as `root_fd` for reading,
// following nothing. Invalid (and `st` untouched) when it is gone or is no
// longer a regular file.
UniqueFd OpenRegular(int root_fd, const std::string& rel, struct stat& st) {
  UniqueFd fd(OpenAtNoFollow(root_fd, rel, O_RDONLY | O_NONBLOCK));
  struct stat now;
  if (!fd.valid() || fstat(fd.get(), &now) != 0 || !S_ISREG(now.st_mode)) return UniqueFd();
  st = now;
  return fd;
}

// The target of the symbolic link `rel` below the root open as `root_fd`;
// nullopt when it is gone or no longer a link.
std::optional<std::string> ReadLinkBelow(int root_fd, const std::string& rel) {
  const size_t slash = rel.rfind('/');
  UniqueFd parent;
  if (slash != std::string::npos) {
    parent.reset(OpenAtNoFollow(root_fd, rel.substr(0, slash), O_RDONLY | O_DIRECTORY));
    if (!parent.valid()) return std::nullopt;
  }
  const std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
  std::string target(PATH_MAX, '\0');
  const ssize_t n =
      readlinkat(parent.valid() ? parent.get() : root_fd, name.c_str(), target.data(),
                 target.size());
  if (n < 0 || static_cast<size_t>(n) >= target.size()) return std::nullopt;
  target.resize(static_cast<size_t>(n));
  return target;
}

}  // namespace

absl::Status ExtractArchive(const std::string& archive_path, const std::string& dest_dir) {
  absl::Status status = MakeDirs(dest_dir);
  if (!status.ok()) return status;
  ReadArchivePtr in = OpenForRead(archive_path, status);
  if (in == nullptr) return status;
  WriteArchivePtr out(archive_write_disk_new());
  // No ARCHIVE_EXTRACT_OWNER: what is unpacked belongs to the unpacking user.
  archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                                                ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  archive_write_disk_set_standard_lookup(out.get());
  struct archive_entry* entry = nullptr;
  while (true) {
    int r = archive_read_next_header(in.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot read archive '", PathForMessage(archive_path), "': ", ArchiveError(in.get())));
    }
    // (Copied: the entry's own storage is replaced below.)
    const char* raw = archive_entry_pathname(entry);
    const std::string raw_name = raw != nullptr ? raw : "";
    auto entry_error = [&](std::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("archive '", PathForMessage(archive_path),
                                                     "': entry '", PathForMessage(raw_name),
                                                     "': ", Av(what)));
    };
    const std::string name = NormalizeEntryName(raw_name);
    if (name.empty()) continue;
    if (!IsSafeRelativePath(name)) {
      return absl::InvalidArgumentError(absl::StrCat("archive '", PathForMessage(archive_path),
                                                     "': entry '", PathForMessage(raw_name),
                                                     "' would land outside the image"));
    }
    // An image holds files, directories and links: no device nodes, FIFOs
    // or sockets (the image is untrusted, and the cache is the host's).
    const char* hardlink = archive_entry_hardlink(entry);
    const mode_t type = archive_entry_filetype(entry);
    if (hardlink == nullptr && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      continue;
    }
    archive_entry_copy_pathname(entry, absl::StrCat(dest_dir, "/", name).c_str());
    if (hardlink != nullptr) {
      const std::string target = NormalizeEntryName(archive_entry_hardlink(entry));
      if (!IsSafeRelativePath(target)) {
        return absl::InvalidArgumentError(absl::StrCat("archive '", PathForMessage(archive_path),
                                                       "': hard link '", PathForMessage(raw_name),
                                                       "' points outside the image"));
      }
      archive_entry_copy_hardlink(entry, absl::StrCat(dest_dir, "/", target).c_str());
    }
    // Ownership is the extracting user's, whatever the archive says, and no
    // file keeps a set-user-ID, set-group-ID or sticky bit.
    archive_entry_set_uid(entry, getuid());
    archive_entry_set_gid(entry, getgid());
    archive_entry_set_perm(entry, archive_entry_perm(entry) & 0777);
    r = archive_write_header(out.get(), entry);
    if (r < ARCHIVE_WARN) return entry_error(ArchiveError(out.get()));
    if (archive_entry_size(entry) > 0) {
      const std::string dest = archive_entry_pathname(entry);
      const void* buf;
      size_t size;
      la_int64_t offset;
      while ((r = archive_read_data_block(in.get(), &buf, &size, &offset)) == ARCHIVE_OK) {
        const la_ssize_t w = archive_write_data_block(out.get(), buf, size, offset);
        // A failed write(2) is only a warning to libarchive, which goes on
        // with the next block: the file would be cut short, and the image
        // taken as complete by every later job that finds it in the cache.
        if (w == ARCHIVE_WARN && archive_errno(out.get()) > 0) {
          return ErrnoStatus(archive_errno(out.get()), "write", dest);
        }
        if (w < ARCHIVE_WARN) {
          return absl::InternalError(absl::StrCat("archive '", PathForMessage(archive_path),
                                                  "': writing '", PathForMessage(raw_name),
                                                  "': ", ArchiveError(out.get())));
        }
      }
      if (r != ARCHIVE_EOF) return entry_error(ArchiveError(in.get()));
    }
    if (archive_write_finish_entry(out.get()) < ARCHIVE_WARN) {
      return absl::InternalError(absl::StrCat("archive '", PathForMessage(archive_path),
                                              "': entry '", PathForMessage(raw_name),
                                              "': ", ArchiveError(out.get())));
    }
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) {
    return absl::InternalError(
        absl::StrCat("unpacking '", PathForMessage(archive_path), "': ", ArchiveError(out.get())));
  }
  return absl::OkStatus();
}

absl::Status WriteTar(const std::vector<TreeRoot>& roots, int out_fd, const std::string& out_name,
                      bool gzip, std::vector<LeftOut>* left_out) {
  absl::StatusOr<MergedTrees> trees = OpenTrees(roots);
  if (!trees.ok()) return trees.status();
  if (left_out != nullptr) *left_out = trees->left_out;
  FdSink sink{out_fd};  // (outlives `out`, whose destruction may still write)
  WriteArchivePtr out(archive_write_new());
  if (gzip) archive_write_add_filter_gzip(out.get());
  archive_write_set_format_pax_restricted(out.get());
  // As archive_write_open_fd does for a regular file: no padding of the last
  // block.
  archive_write_set_bytes_in_last_block(out.get(), 1);
  if (archive_write_open(out.get(), &sink, nullptr, WriteToSink, nullptr) != ARCHIVE_OK) {
    return WriteFailure(out.get(), sink, out_name,
                        absl::StrCat("cannot create archive '", PathForMessage(out_name), "': "));
  }
  std::unique_ptr<struct archive_entry, decltype(&archive_entry_free)> entry(archive_entry_new(),
                                                                            &archive_entry_free);
  std::vector<char> buf(1 << 16);
  for (const auto& [rel, src] : trees->entries) {
    const int root_fd = trees->root_fds[src.root].get();
    const std::string display = Below(roots[src.root], rel);
    struct stat st = src.st;
    UniqueFd fd;
    std::optional<std::string> link_target;
    if (S_ISLNK(st.st_mode)) {
      link_target = ReadLinkBelow(root_fd, rel);
      if (!link_target.has_value()) continue;  // gone meanwhile
    } else if (S_ISREG(st.st_mode)) {
      fd = OpenRegular(root_fd, rel, st);
      if (!fd.valid()) continue;  // gone or replaced meanwhile
    }
    archive_entry_clear(entry.get());
    archive_entry_copy_pathname(entry.get(), rel.c_str());
    archive_entry_copy_stat(entry.get(), &st);
    if (link_target.has_value()) archive_entry_copy_symlink(entry.get(), link_target->c_str());
    if (archive_write_header(out.get(), entry.get()) != ARCHIVE_OK) {
      return WriteFailure(out.get(), sink, out_name,
                          absl::StrCat("archive '", PathForMessage(out_name), "': entry '",
                                       PathForMessage(rel), "': "));
    }
    if (!fd.valid()) continue;
    // Exactly the size the header announced, even if the file changes.
    int64_t left = st.st_size;
    while (left > 0) {
      ssize_t n =
          read(fd.get(), buf.data(), static_cast<size_t>(std::min<int64_t>(left, buf.size())));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, "read", display);
      if (n == 0) {  // shrank meanwhile: pad with zeros
        std::fill(buf.begin(), buf.end(), 0);
        n = static_cast<ssize_t>(std::min<int64_t>(left, buf.size()));
      }
      if (archive_write_data(out.get(), buf.data(), static_cast<size_t>(n)) < 0) {
        return WriteFailure(out.get(), sink, out_name,
                            absl::StrCat("archive '", PathForMessage(out_name), "': writing '",
                                         PathForMessage(rel), "': "));
      }
      left -= n;
    }
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) {
    return WriteFailure(out.get(), sink, out_name,
                        absl::StrCat("closing archive '", PathForMessage(out_name), "': "));
  }
  return absl::OkStatus();
}

absl::Status ForEachMergedFile(
    const std::vector<TreeRoot>& roots,
    absl::FunctionRef<absl::Status(const std::string& rel, int fd, int64_t size)> fn,
    std::vector<LeftOut>* left_out) {
  absl::StatusOr<MergedTrees> trees = OpenTrees(roots);
  if (!trees.ok()) return trees.status();
  if (left_out != nullptr) *left_out = trees->left_out;
  for (const auto& [rel, src] : trees->entries) {
    if (!S_ISREG(src.st.st_mode)) continue;
    struct stat st = src.st;
    UniqueFd fd = OpenRegular(trees->root_fds[src.root].get(), rel, st);
    if (!fd.valid()) continue;  // gone or replaced meanwhile
    absl::Status s = fn(rel, fd.get(), static_cast<int64_t>(st.st_size));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<ArchiveContents> ReadArchive(const std::string& archive_path) {
  absl::Status status;
  ReadArchivePtr in = OpenForRead(archive_path, status);
  if (in == nullptr) return status;
  ArchiveContents contents;
  struct archive_entry* entry = nullptr;
  while (true) {
    int r = archive_read_next_header(in.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot read archive '", PathForMessage(archive_path), "': ", ArchiveError(in.get())));
    }
    const char* raw_name = archive_entry_pathname(entry);  // null for an entry without one
    const std::string name = NormalizeEntryName(raw_name != nullptr ? raw_name : "");
    if (archive_entry_filetype(entry) == AE_IFDIR) {
      contents.directories.push_back(name);
      continue;
    }
    if (archive_entry_filetype(entry) == AE_IFLNK) {
      const char* target = archive_entry_symlink(entry);
      contents.symlinks[name] = target != nullptr ? target : "";
      continue;
    }
    if (archive_entry_filetype(entry) != AE_IFREG) continue;
    std::string data;
    const void* buf;
    size_t size;
    la_int64_t offset;
    while ((r = archive_read_data_block(in.get(), &buf, &size, &offset)) == ARCHIVE_OK) {
      data.resize(static_cast<size_t>(offset));
      data.append(static_cast<const char*>(buf), size);
    }
    if (r != ARCHIVE_EOF) {
      return absl::InvalidArgumentError(absl::StrCat("archive '", PathForMessage(archive_path),
                                                     "': entry '", PathForMessage(name),
                                                     "': ", ArchiveError(in.get())));
    }
    contents.files[name] = std::move(data);
  }
  for (int i = 0; i < archive_filter_count(in.get()); ++i) {
    if (archive_filter_code(in.get(), i) == ARCHIVE_FILTER_NONE) continue;
    contents.filters.push_back(archive_filter_name(in.get(), i));
  }
  return contents;
}

}  // namespace kiln::local::internal
