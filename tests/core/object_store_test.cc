// The file store's own rules (atomic replace, URIs, errors naming the path, a full disk),
// the scheme registry and the in-memory store's schemes. What every store does is the
// conformance suite, tests/conformance/object_store_conformance.h.
#include "kiln/object_store.h"

#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "conformance/object_store_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using store_testing::DirEntries;
using store_testing::Pattern;
using store_testing::ReadLocal;
using store_testing::TempDir;
using store_testing::Uris;
using store_testing::WriteLocal;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// ---------------------------------------------------------------------------
// The file store's own rules.

class FileObjectStoreTest : public ::testing::Test {
 protected:
  std::string Uri(const std::string& rel) const {
    return absl::StrCat("file://", dir_.path(), "/", rel);
  }
  std::string Path(const std::string& rel) const { return absl::StrCat(dir_.path(), "/", rel); }

  TempDir dir_;
  std::unique_ptr<ObjectStore> store_ = NewFileObjectStore();
};

// While an object lies below a key, the key cannot be an object in a file
// store (a file and a directory at one path), and the write leaves the
// objects below as they were.
TEST_F(FileObjectStoreTest, AKeyWithAnObjectDeepBelowIsNotReplaced) {
  ASSERT_TRUE(store_->Put(Uri("a/x/gone"), "1").ok());
  ASSERT_TRUE(store_->Put(Uri("a/y/z/kept"), "2").ok());
  ASSERT_TRUE(store_->Delete(Uri("a/x/gone")).ok());
  absl::Status put = store_->Put(Uri("a"), "3");
  EXPECT_FALSE(put.ok());
  EXPECT_THAT(put.message(), HasSubstr(Path("a")));
  EXPECT_EQ(store_->Get(Uri("a/y/z/kept")).value_or(""), "2");
}

TEST_F(FileObjectStoreTest, PutWritesTheFileAtThePathAndLeavesNoTemporary) {
  ASSERT_TRUE(store_->Put(Uri("out/model.tar.gz"), "payload").ok());
  EXPECT_EQ(ReadLocal(Path("out/model.tar.gz")), "payload");
  EXPECT_THAT(DirEntries(Path("out")), ElementsAre("model.tar.gz"));
  std::string source = Path("src");
  WriteLocal(source, "from a file");
  ASSERT_TRUE(store_->PutFromFile(Uri("out/model.tar.gz"), source).ok());
  EXPECT_EQ(ReadLocal(Path("out/model.tar.gz")), "from a file");
  EXPECT_THAT(DirEntries(Path("out")), ElementsAre("model.tar.gz"));
}

TEST_F(FileObjectStoreTest, UrisThatAreNotAbsoluteFileUrisAreInvalidArgumentNamingTheUri) {
  for (std::string uri : {std::string("s3://bucket/key"), std::string("file://host/path"),
                          std::string("file:relative"), std::string("file://"), Path("x"),
                          std::string("mem://a/b")}) {
    SCOPED_TRACE(uri);
    absl::Status put = store_->Put(uri, "x");
    EXPECT_EQ(put.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(put.message(), HasSubstr(uri));
    EXPECT_EQ(store_->Get(uri).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->List(uri).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(store_->Delete(uri).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST_F(FileObjectStoreTest, ObjectUriEndingInSlashIsInvalidArgument) {
  absl::Status status = store_->Put(Uri("dir/"), "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("dir/"));
}

TEST_F(FileObjectStoreTest, ListReportsRegularFilesOnlyAndSkipsTemporaries) {
  WriteLocal(Path("d/file"), "12345");
  WriteLocal(Path("d/.kiln-tmp-0123456789abcdef"), "half written");
  fs::create_directories(Path("d/empty-dir"));
  ASSERT_EQ(::mkfifo(Path("d/fifo").c_str(), 0600), 0);
  fs::create_symlink(Path("d/file"), Path("d/link-to-file"));
  fs::create_directory_symlink(Path("d"), Path("d/link-to-dir"));  // a cycle if followed
  absl::StatusOr<std::vector<ObjectInfo>> listed = store_->List(Uri("d/"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(Uris(*listed), ElementsAre(Uri("d/file"), Uri("d/link-to-file")));
  EXPECT_EQ(listed->at(1).size, 5);
}

TEST_F(FileObjectStoreTest, ListBelowAFileOrAMissingDirectoryIsEmpty) {
  WriteLocal(Path("f"), "x");
  EXPECT_THAT(store_->List(Uri("f/g")).value(), IsEmpty());
  EXPECT_THAT(store_->List(Uri("no/such/dir/")).value(), IsEmpty());
}

TEST_F(FileObjectStoreTest, DirectoryIsNotAnObject) {
  fs::create_directories(Path("dir/sub"));
  EXPECT_EQ(store_->Get(Uri("dir/sub")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(store_->Delete(Uri("dir/sub")).ok());
  EXPECT_TRUE(fs::is_directory(Path("dir/sub")));
  // A Put of a directory's own key fails while it holds anything but
  // folders (a file, a link), however deep...
  WriteLocal(Path("dir/sub/deeper/file"), "f");
  fs::create_directories(Path("dir/sub/empty"));
  EXPECT_FALSE(store_->Put(Uri("dir/sub"), "x").ok());
  EXPECT_EQ(ReadLocal(Path("dir/sub/deeper/file")), "f");
  EXPECT_THAT(DirEntries(Path("dir")), ElementsAre("sub"));
  fs::remove(Path("dir/sub/deeper/file"));
  fs::create_symlink("/", Path("dir/sub/deeper/link"));
  EXPECT_FALSE(store_->Put(Uri("dir/sub"), "x").ok());
  EXPECT_TRUE(fs::is_symlink(Path("dir/sub/deeper/link")));
  // ...and replaces it once it holds only folders (so no object).
  fs::remove(Path("dir/sub/deeper/link"));
  EXPECT_TRUE(store_->Put(Uri("dir/sub"), "x").ok());
  EXPECT_EQ(store_->Get(Uri("dir/sub")).value_or(""), "x");
}

TEST_F(FileObjectStoreTest, FifoIsNotReadAndDoesNotBlock) {
  ASSERT_EQ(::mkfifo(Path("fifo").c_str(), 0600), 0);
  EXPECT_EQ(store_->Get(Uri("fifo")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(FileObjectStoreTest, ReadStreamsChunksOfAtMostOneMiB) {
  std::string data = Pattern(5 * 1024 * 1024 + 11, 3);
  WriteLocal(Path("big"), data);
  std::vector<size_t> sizes;
  std::string streamed;
  ASSERT_TRUE(store_
                  ->Read(Uri("big"),
                         [&](std::string_view chunk) {
                           sizes.push_back(chunk.size());
                           streamed.append(chunk);
                           return absl::OkStatus();
                         })
                  .ok());
  EXPECT_GE(sizes.size(), 6u);
  for (size_t size : sizes) EXPECT_LE(size, 1024u * 1024u);
  EXPECT_TRUE(streamed == data);
}

TEST_F(FileObjectStoreTest, PutUnderAFileNamesThePath) {
  WriteLocal(Path("plain"), "x");
  absl::Status status = store_->Put(Uri("plain/child"), "y");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(Path("plain")));
  EXPECT_EQ(ReadLocal(Path("plain")), "x");
}

// Local paths, which hold keys, are shown escaped too: here the directory
// that cannot be made, which the file store's MakeDirs names.
TEST_F(FileObjectStoreTest, LocalPathsInErrorsAreShownEscaped) {
  WriteLocal(Path("a\nb\xfe"), "a file, not a directory");
  const std::string shown = absl::StrCat("create directory '", Path(R"(a\nb\xFE)"), "'");
  absl::Status status = store_->Put(Uri("a\nb\xfe/object"), "y");
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(shown));
  EXPECT_EQ(std::string(status.message()).find('\n'), std::string::npos) << status;
  ASSERT_TRUE(store_->Put(Uri("object"), "z").ok());
  status = store_->GetToFile(Uri("object"), Path("a\nb\xfe/copy"));
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(shown));
}

// Runs `body` in a forked child and returns what it wrote to the pipe, or
// "SKIP: ..." text; the child's exit code must be 0.
std::string RunInChild(const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return "SKIP: pipe";
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::string out = body();
    size_t done = 0;
    while (done < out.size()) {
      ssize_t n = ::write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buffer, sizeof buffer)) > 0)
    out.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "child status " << wstatus;
  return out;
}

std::string Describe(const absl::Status& status) {
  return absl::StrCat(absl::StatusCodeToString(status.code()), "|", status.message());
}

TEST_F(FileObjectStoreTest, PutIntoReadOnlyDirectoryIsPermissionDeniedNamingThePath) {
  fs::create_directories(Path("ro"));
  fs::permissions(dir_.path(),
                  fs::perms::owner_all | fs::perms::group_exec | fs::perms::others_exec);
  fs::permissions(Path("ro"), fs::perms::owner_read | fs::perms::owner_exec |
                                  fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  std::string uri = Uri("ro/object");
  // Root ignores directory permissions: the put then runs as 'nobody'.
  std::string result = RunInChild([&]() -> std::string {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) {
      return "SKIP: cannot drop root privileges";
    }
    return Describe(store_->Put(uri, "data"));
  });
  if (result.rfind("SKIP", 0) == 0) GTEST_SKIP() << result;
  EXPECT_THAT(result, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(result, HasSubstr(Path("ro/object")));
  EXPECT_THAT(DirEntries(Path("ro")), IsEmpty());
}

TEST_F(FileObjectStoreTest, FullDiskIsResourceExhaustedNamingThePathAndLeavesNoTemporary) {
  // A 64 KiB tmpfs in a private mount namespace of a child process.
  std::string mount_point = Path("tiny");
  fs::create_directories(mount_point);
  std::string source = Path("big-source");
  WriteLocal(source, Pattern(1 << 20, 5));
  std::string result = RunInChild([&]() -> std::string {
    if (::unshare(CLONE_NEWNS) != 0) return "SKIP: unshare(CLONE_NEWNS) not permitted";
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return "SKIP: mount --make-rprivate";
    if (::mount("tmpfs", mount_point.c_str(), "tmpfs", 0, "size=64k") != 0)
      return "SKIP: mount tmpfs";
    std::string out;
    std::string uri = absl::StrCat("file://", mount_point, "/sub/object");
    absl::StrAppend(&out, Describe(store_->Put(uri, Pattern(1 << 20, 4))), "\n");
    absl::StrAppend(&out, Describe(store_->PutFromFile(uri, source)), "\n");
    absl::StrAppend(
        &out, Describe(store_->GetToFile(absl::StrCat("file://", source), mount_point + "/copy")),
        "\n");
    for (const auto& entry : fs::recursive_directory_iterator(mount_point)) {
      if (entry.is_regular_file()) absl::StrAppend(&out, "LEFT ", entry.path().string(), "\n");
    }
    return out;
  });
  if (result.rfind("SKIP", 0) == 0) GTEST_SKIP() << result;
  std::vector<std::string> lines;
  std::istringstream in(result);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << result;  // and no LEFT lines
  for (int i = 0; i < 2; ++i) {
    EXPECT_THAT(lines[i], HasSubstr("RESOURCE_EXHAUSTED"));
    EXPECT_THAT(lines[i], HasSubstr(mount_point + "/sub/object"));
  }
  EXPECT_THAT(lines[2], HasSubstr("RESOURCE_EXHAUSTED"));
  EXPECT_THAT(lines[2], HasSubstr(mount_point + "/copy"));
}

// ---------------------------------------------------------------------------
// ObjectStores.

// ---------------------------------------------------------------------------
// Links out of a listed folder, confinement to roots.

TEST_F(FileObjectStoreTest, ListRefusesALinkLeadingOutOfTheListedFolderNamingIt) {
  WriteLocal(Path("secret"), "not for jobs");
  WriteLocal(Path("src/a.csv"), "a");
  WriteLocal(Path("src/sub/b.csv"), "b");
  fs::create_symlink(Path("src/a.csv"), Path("src/sub/inside-link"));  // stays in: listed
  fs::create_symlink(Path("secret"), Path("src/sub/shadow-link"));
  absl::StatusOr<std::vector<ObjectInfo>> listed = store_->List(Uri("src/"));
  ASSERT_EQ(listed.status().code(), absl::StatusCode::kPermissionDenied) << listed.status();
  EXPECT_THAT(listed.status().message(), HasSubstr(Path("src/sub/shadow-link")));
  EXPECT_THAT(listed.status().message(), HasSubstr(Path("secret")));
  fs::remove(Path("src/sub/shadow-link"));
  listed = store_->List(Uri("src/"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(Uris(*listed),
              ElementsAre(Uri("src/a.csv"), Uri("src/sub/b.csv"), Uri("src/sub/inside-link")));
}

class ConfinedFileObjectStoreTest : public FileObjectStoreTest {
 protected:
  void SetUp() override {
    fs::create_directories(Path("root"));
    WriteLocal(Path("secret"), "not for jobs");
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        NewFileObjectStore(FileObjectStoreOptions{{Path("root")}});
    ASSERT_TRUE(store.ok()) << store.status();
    confined_ = *std::move(store);
  }
  void ExpectRefusedNamingUriAndRoot(const absl::Status& status, const std::string& uri) {
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
    EXPECT_THAT(status.message(), HasSubstr(uri));
    EXPECT_THAT(status.message(), HasSubstr(Path("root")));
  }

  std::unique_ptr<ObjectStore> confined_;
};

TEST_F(ConfinedFileObjectStoreTest, AFileOutsideTheRootsIsNeitherReadNorListed) {
  const std::string uri = Uri("secret");
  ExpectRefusedNamingUriAndRoot(confined_->Get(uri).status(), uri);
  ExpectRefusedNamingUriAndRoot(confined_->ReadRange(uri, 0, 4).status(), uri);
  ExpectRefusedNamingUriAndRoot(
      confined_->Read(uri, [](std::string_view) { return absl::OkStatus(); }), uri);
  ExpectRefusedNamingUriAndRoot(confined_->GetToFile(uri, Path("root/copy")), uri);
  EXPECT_FALSE(fs::exists(Path("root/copy")));
  ExpectRefusedNamingUriAndRoot(confined_->List(Uri("")).status(), Uri(""));
  ExpectRefusedNamingUriAndRoot(confined_->LocalPath(uri).status(), uri);
}

TEST_F(ConfinedFileObjectStoreTest, NothingIsWrittenOrDeletedOutsideTheRoots) {
  ExpectRefusedNamingUriAndRoot(confined_->Put(Uri("secret"), "x"), Uri("secret"));
  ExpectRefusedNamingUriAndRoot(confined_->Put(Uri("new/dir/obj"), "x"), Uri("new/dir/obj"));
  ExpectRefusedNamingUriAndRoot(confined_->PutFromFile(Uri("secret"), Path("root/../secret")),
                                Uri("secret"));
  ExpectRefusedNamingUriAndRoot(confined_->Delete(Uri("secret")), Uri("secret"));
  EXPECT_EQ(ReadLocal(Path("secret")), "not for jobs");
  EXPECT_FALSE(fs::exists(Path("new")));
}

TEST_F(ConfinedFileObjectStoreTest, LinksInsideTheRootsLeadNowhereOutside) {
  fs::create_symlink(Path("secret"), Path("root/shadow-link"));
  fs::create_directory_symlink(dir_.path(), Path("root/up"));
  ExpectRefusedNamingUriAndRoot(confined_->Get(Uri("root/shadow-link")).status(),
                                Uri("root/shadow-link"));
  ExpectRefusedNamingUriAndRoot(confined_->Get(Uri("root/up/secret")).status(),
                                Uri("root/up/secret"));
  // A write through a linked folder would land outside.
  ExpectRefusedNamingUriAndRoot(confined_->Put(Uri("root/up/planted"), "x"),
                                Uri("root/up/planted"));
  ExpectRefusedNamingUriAndRoot(confined_->Put(Uri("root/up/deeper/planted"), "x"),
                                Uri("root/up/deeper/planted"));
  EXPECT_FALSE(fs::exists(Path("planted")));
  EXPECT_FALSE(fs::exists(Path("deeper")));
  ExpectRefusedNamingUriAndRoot(confined_->List(Uri("root/up/")).status(), Uri("root/up/"));
}

TEST_F(ConfinedFileObjectStoreTest, DotDotSegmentsAreRefused) {
  absl::Status status = confined_->Put(Uri("root/new/../../escaped"), "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_EQ(confined_->Get(Uri("root/../secret")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(Path("escaped")));
}

TEST_F(ConfinedFileObjectStoreTest, ObjectsInsideTheRootsAndLinksBetweenThemWork) {
  ASSERT_TRUE(confined_->Put(Uri("root/out/model"), "m").ok());
  fs::create_symlink(Path("root/out/model"), Path("root/out/alias"));
  EXPECT_EQ(confined_->Get(Uri("root/out/alias")).value_or(""), "m");
  EXPECT_THAT(Uris(confined_->List(Uri("root/out/")).value()),
              ElementsAre(Uri("root/out/alias"), Uri("root/out/model")));
  EXPECT_EQ(confined_->LocalPath(Uri("root/out/alias")).value_or(""), Path("root/out/model"));
  EXPECT_TRUE(confined_->Delete(Uri("root/out/alias")).ok());
  EXPECT_TRUE(fs::exists(Path("root/out/model")));
}

TEST_F(ConfinedFileObjectStoreTest, ARootThatIsNotAnExistingAbsoluteDirectoryIsRefused) {
  for (const std::string& root : {std::string("relative/dir"), Path("missing"), Path("secret"),
                                  std::string()}) {
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        NewFileObjectStore(FileObjectStoreOptions{{root}});
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument) << root;
  }
}

// ---------------------------------------------------------------------------
// Temporary files of killed writers, sparse files.

TEST_F(FileObjectStoreTest, TemporaryFileOfAKilledWriterIsRemovedByTheNextWriteThere) {
  // What a writer killed before its rename leaves: a temporary file nobody
  // holds (its lock ended with its process).
  WriteLocal(Path("model/.kiln-tmp-0123456789abcdef"), "half an upload");
  // A writer still at work holds its own locked.
  WriteLocal(Path("model/.kiln-tmp-fedcba9876543210"), "being written");
  int held = ::open(Path("model/.kiln-tmp-fedcba9876543210").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  ASSERT_TRUE(store_->Put(Uri("model/weights.bin"), "w").ok());
  EXPECT_THAT(DirEntries(Path("model")), ElementsAre(".kiln-tmp-fedcba9876543210", "weights.bin"));
  ::close(held);
}

// A file of `size` bytes holding `data` at `offset`, holes elsewhere.
void WriteSparse(const std::string& path, off_t size, off_t offset, std::string_view data) {
  fs::create_directories(fs::path(path).parent_path());
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::ftruncate(fd, size), 0);
  ASSERT_EQ(::pwrite(fd, data.data(), data.size(), offset), static_cast<ssize_t>(data.size()));
  ::close(fd);
}

int64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_blocks) * 512;
}

TEST_F(FileObjectStoreTest, ASparseFileStaysSparseThroughPutFromFileAndGetToFile) {
  constexpr off_t kSize = off_t{256} << 20;  // 256 MiB, nearly all holes
  constexpr off_t kAt = off_t{100} << 20;
  const std::string data = Pattern(64 * 1024, 9);
  WriteSparse(Path("local/sparse.bin"), kSize, kAt, data);
  if (AllocatedBytes(Path("local/sparse.bin")) > (off_t{4} << 20)) {
    GTEST_SKIP() << "this file system does not keep holes";
  }
  ASSERT_TRUE(store_->PutFromFile(Uri("store/model.bin"), Path("local/sparse.bin")).ok());
  EXPECT_EQ(fs::file_size(Path("store/model.bin")), static_cast<uintmax_t>(kSize));
  EXPECT_LT(AllocatedBytes(Path("store/model.bin")), int64_t{4} << 20);
  EXPECT_EQ(store_->ReadRange(Uri("store/model.bin"), kAt - 1, data.size() + 2).value_or(""),
            absl::StrCat(std::string(1, '\0'), data, std::string(1, '\0')));
  ASSERT_TRUE(store_->GetToFile(Uri("store/model.bin"), Path("local/back.bin")).ok());
  EXPECT_EQ(fs::file_size(Path("local/back.bin")), static_cast<uintmax_t>(kSize));
  EXPECT_LT(AllocatedBytes(Path("local/back.bin")), int64_t{4} << 20);
  // Holes at both ends, data only in the middle, and a file all hole.
  WriteSparse(Path("local/hole.bin"), kSize, 0, "");
  ASSERT_TRUE(store_->PutFromFile(Uri("store/hole.bin"), Path("local/hole.bin")).ok());
  EXPECT_EQ(fs::file_size(Path("store/hole.bin")), static_cast<uintmax_t>(kSize));
  EXPECT_LT(AllocatedBytes(Path("store/hole.bin")), int64_t{1} << 20);
}

TEST(ObjectStoresTest, RoutesEachUriToTheStoreOfItsScheme) {
  std::unique_ptr<ObjectStore> file = NewFileObjectStore();
  std::unique_ptr<ObjectStore> mem = NewInMemoryObjectStore();
  ObjectStores stores;
  stores.Register("file", file.get());
  stores.Register("mem", mem.get());
  EXPECT_EQ(stores.For("file:///data/x").value_or(nullptr), file.get());
  EXPECT_EQ(stores.For("mem://bucket/k").value_or(nullptr), mem.get());
}

TEST(ObjectStoresTest, UnregisteredSchemeIsFailedPreconditionNamingTheScheme) {
  std::unique_ptr<ObjectStore> mem = NewInMemoryObjectStore();
  ObjectStores stores;
  stores.Register("mem", mem.get());
  absl::StatusOr<ObjectStore*> got = stores.For("s3://bucket/key");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(), HasSubstr("'s3'"));
}

TEST(ObjectStoresTest, UrisInErrorsAreShownEscaped) {
  ObjectStores stores;
  absl::StatusOr<ObjectStore*> got = stores.For("s3://bucket/a\nb");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got.status().message(), HasSubstr(R"((URI 's3://bucket/a\nb'))"));
  got = stores.For("no scheme\x85");
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(got.status().message(), HasSubstr(R"('no scheme\x85' has no URI scheme)"));
}

TEST(ObjectStoresTest, UriWithoutSchemeIsInvalidArgument) {
  ObjectStores stores;
  std::unique_ptr<ObjectStore> file = NewFileObjectStore();
  stores.Register("file", file.get());
  for (const char* uri : {"/data/train", "://x", "file:/data", "", "bad/scheme://x", "1s3://b/k"}) {
    absl::StatusOr<ObjectStore*> got = stores.For(uri);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << uri;
  }
}

TEST(ObjectStoresTest, RegisterReplacesAndNullUnregisters) {
  std::unique_ptr<ObjectStore> first = NewInMemoryObjectStore();
  std::unique_ptr<ObjectStore> second = NewInMemoryObjectStore();
  ObjectStores stores;
  stores.Register("mem", first.get());
  stores.Register("mem", second.get());
  EXPECT_EQ(stores.For("mem://b/k").value_or(nullptr), second.get());
  stores.Register("mem", nullptr);
  EXPECT_EQ(stores.For("mem://b/k").status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(InMemoryObjectStoreTest, ServesAnySchemeButNeedsOne) {
  std::unique_ptr<ObjectStore> store = NewInMemoryObjectStore();
  EXPECT_TRUE(store->Put("s3://b/k", "1").ok());
  EXPECT_TRUE(store->Put("file:///x", "2").ok());
  EXPECT_EQ(store->Put("no-scheme", "3").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Uris(store->List("s3://").value()), ElementsAre("s3://b/k"));
}

}  // namespace
}  // namespace kiln
