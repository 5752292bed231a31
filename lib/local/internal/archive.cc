#include "local/internal/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {
namespace {

struct ReadCloser {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
struct WriteCloser {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
using ReadArchivePtr = std::unique_ptr<struct archive, ReadCloser>;
using WriteArchivePtr = std::unique_ptr<struct archive, WriteCloser>;

std::string ArchiveError(struct archive* a) {
  const char* e = archive_error_string(a);
  return e != nullptr ? e : "unknown error";
}

// An entry name made relative: "./a/b/" -> "a/b". Empty for the top directory.
std::string NormalizeEntryName(std::string_view name) {
  while (name.substr(0, 2) == "./") name.remove_prefix(2);
  while (!name.empty() && name.back() == '/') name.remove_suffix(1);
  if (name == ".") return "";
  return std::string(name);
}

ReadArchivePtr OpenForRead(const std::string& path, absl::Status& status) {
  ReadArchivePtr a(archive_read_new());
  archive_read_support_filter_all(a.get());
  archive_read_support_format_all(a.get());
  if (archive_read_open_filename(a.get(), path.c_str(), 1 << 16) != ARCHIVE_OK) {
    status = absl::InvalidArgumentError(
        absl::StrCat("cannot read archive '", path, "': ", ArchiveError(a.get())));
    return nullptr;
  }
  return a;
}

struct Source {
  std::string path;
  struct stat st;
};

absl::Status Collect(const std::string& root, const std::string& rel,
                     std::map<std::string, Source>& out) {
  const std::string dir = rel.empty() ? root : absl::StrCat(root, "/", rel);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, "read directory", dir);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.emplace_back(e->d_name);
  }
  closedir(d);
  for (const std::string& name : names) {
    const std::string child_rel = rel.empty() ? name : absl::StrCat(rel, "/", name);
    Source src;
    src.path = absl::StrCat(dir, "/", name);
    if (lstat(src.path.c_str(), &src.st) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      return ErrnoStatus(errno, "stat", src.path);
    }
    const bool is_dir = S_ISDIR(src.st.st_mode);
    if (!is_dir && !S_ISREG(src.st.st_mode) && !S_ISLNK(src.st.st_mode)) continue;
    out[child_rel] = src;
    if (is_dir) {
      absl::Status s = Collect(root, child_rel, out);
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ExtractArchive(const std::string& archive_path, const std::string& dest_dir) {
  absl::Status status = MakeDirs(dest_dir);
  if (!status.ok()) return status;
  ReadArchivePtr in = OpenForRead(archive_path, status);
  if (in == nullptr) return status;
  WriteArchivePtr out(archive_write_disk_new());
  archive_write_disk_set_options(out.get(), ARCHIVE_EXTRACT_TIME | ARCHIVE_EXTRACT_PERM |
                                                ARCHIVE_EXTRACT_SECURE_SYMLINKS |
                                                ARCHIVE_EXTRACT_SECURE_NODOTDOT);
  archive_write_disk_set_standard_lookup(out.get());
  struct archive_entry* entry = nullptr;
  while (true) {
    int r = archive_read_next_header(in.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read archive '", archive_path, "': ", ArchiveError(in.get())));
    }
    const char* raw_name = archive_entry_pathname(entry);
    const std::string name = NormalizeEntryName(raw_name != nullptr ? raw_name : "");
    if (name.empty()) continue;
    if (!IsSafeRelativePath(name)) {
      return absl::InvalidArgumentError(absl::StrCat("archive '", archive_path, "': entry '",
                                                     raw_name, "' would land outside the image"));
    }
    archive_entry_copy_pathname(entry, absl::StrCat(dest_dir, "/", name).c_str());
    if (const char* link = archive_entry_hardlink(entry); link != nullptr) {
      const std::string target = NormalizeEntryName(link);
      if (!IsSafeRelativePath(target)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "archive '", archive_path, "': hard link '", raw_name, "' points outside the image"));
      }
      archive_entry_copy_hardlink(entry, absl::StrCat(dest_dir, "/", target).c_str());
    }
    // Ownership is the extracting user's, whatever the archive says.
    archive_entry_set_uid(entry, getuid());
    archive_entry_set_gid(entry, getgid());
    r = archive_write_header(out.get(), entry);
    if (r < ARCHIVE_WARN) {
      return absl::InvalidArgumentError(absl::StrCat("archive '", archive_path, "': entry '",
                                                     raw_name, "': ", ArchiveError(out.get())));
    }
    if (archive_entry_size(entry) > 0) {
      const void* buf;
      size_t size;
      la_int64_t offset;
      while ((r = archive_read_data_block(in.get(), &buf, &size, &offset)) == ARCHIVE_OK) {
        if (archive_write_data_block(out.get(), buf, size, offset) < ARCHIVE_WARN) {
          return absl::InternalError(absl::StrCat("archive '", archive_path, "': writing '",
                                                  raw_name, "': ", ArchiveError(out.get())));
        }
      }
      if (r != ARCHIVE_EOF) {
        return absl::InvalidArgumentError(absl::StrCat("archive '", archive_path, "': entry '",
                                                       raw_name, "': ", ArchiveError(in.get())));
      }
    }
    if (archive_write_finish_entry(out.get()) < ARCHIVE_WARN) {
      return absl::InternalError(absl::StrCat("archive '", archive_path, "': entry '", raw_name,
                                              "': ", ArchiveError(out.get())));
    }
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) {
    return absl::InternalError(
        absl::StrCat("unpacking '", archive_path, "': ", ArchiveError(out.get())));
  }
  return absl::OkStatus();
}

absl::Status WriteTar(const std::vector<std::string>& roots, const std::string& out_path,
                      bool gzip) {
  std::map<std::string, Source> entries;
  for (const std::string& root : roots) {
    if (!IsDirectory(root)) continue;
    absl::Status s = Collect(root, "", entries);
    if (!s.ok()) return s;
  }
  WriteArchivePtr out(archive_write_new());
  if (gzip) archive_write_add_filter_gzip(out.get());
  archive_write_set_format_pax_restricted(out.get());
  if (archive_write_open_filename(out.get(), out_path.c_str()) != ARCHIVE_OK) {
    return absl::InternalError(
        absl::StrCat("cannot create archive '", out_path, "': ", ArchiveError(out.get())));
  }
  std::unique_ptr<struct archive_entry, decltype(&archive_entry_free)> entry(archive_entry_new(),
                                                                            &archive_entry_free);
  std::vector<char> buf(1 << 16);
  for (const auto& [rel, src] : entries) {
    archive_entry_clear(entry.get());
    archive_entry_copy_pathname(entry.get(), rel.c_str());
    archive_entry_copy_stat(entry.get(), &src.st);
    int fd = -1;
    if (S_ISLNK(src.st.st_mode)) {
      std::string target(static_cast<size_t>(src.st.st_size) + 1, '\0');
      ssize_t n = readlink(src.path.c_str(), target.data(), target.size());
      if (n < 0) return ErrnoStatus(errno, "read link", src.path);
      target.resize(static_cast<size_t>(n));
      archive_entry_copy_symlink(entry.get(), target.c_str());
    } else if (S_ISREG(src.st.st_mode)) {
      fd = open(src.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) return ErrnoStatus(errno, "open", src.path);
    }
    if (archive_write_header(out.get(), entry.get()) != ARCHIVE_OK) {
      if (fd >= 0) close(fd);
      return absl::InternalError(absl::StrCat("archive '", out_path, "': entry '", rel,
                                              "': ", ArchiveError(out.get())));
    }
    if (fd >= 0) {
      // Exactly the size the header announced, even if the file changes.
      int64_t left = src.st.st_size;
      absl::Status status;
      while (left > 0) {
        ssize_t n = read(fd, buf.data(), static_cast<size_t>(std::min<int64_t>(left, buf.size())));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
          status = ErrnoStatus(errno, "read", src.path);
          break;
        }
        if (n == 0) {  // shrank meanwhile: pad with zeros
          std::fill(buf.begin(), buf.end(), 0);
          n = static_cast<ssize_t>(std::min<int64_t>(left, buf.size()));
        }
        if (archive_write_data(out.get(), buf.data(), static_cast<size_t>(n)) < 0) {
          status = absl::InternalError(absl::StrCat("archive '", out_path, "': writing '", rel,
                                                    "': ", ArchiveError(out.get())));
          break;
        }
        left -= n;
      }
      close(fd);
      if (!status.ok()) return status;
    }
  }
  if (archive_write_close(out.get()) != ARCHIVE_OK) {
    return absl::InternalError(
        absl::StrCat("closing archive '", out_path, "': ", ArchiveError(out.get())));
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
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read archive '", archive_path, "': ", ArchiveError(in.get())));
    }
    const std::string name = NormalizeEntryName(archive_entry_pathname(entry));
    if (archive_entry_filetype(entry) == AE_IFDIR) {
      contents.directories.push_back(name);
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
      return absl::InvalidArgumentError(absl::StrCat("archive '", archive_path, "': entry '",
                                                     name, "': ", ArchiveError(in.get())));
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
