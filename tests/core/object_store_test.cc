// ObjectStore: one conformance suite run against every implementation (the
// file store, the in-memory store, and a store that keeps ObjectStore's
// default Read/GetToFile/PutFromFile), then the file store's own rules
// (atomic replace, URIs, errors naming the path, a full disk) and the scheme
// registry.
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
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A fresh directory under the test temp dir, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "kiln-object-store-XXXXXX";
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr) << "mkdtemp " << pattern;
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string ReadLocal(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteLocal(const std::string& path, std::string_view data) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  ASSERT_TRUE(out.good()) << path;
}

// Names of the entries of `dir` (not recursive), sorted.
std::vector<std::string> DirEntries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

std::string Pattern(size_t size, uint32_t seed) {
  std::string data(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (char& c : data) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 23);
  }
  return data;
}

std::vector<std::string> Uris(const std::vector<ObjectInfo>& infos) {
  std::vector<std::string> uris;
  for (const ObjectInfo& info : infos) uris.push_back(info.uri);
  return uris;
}

// Forwards the four required methods to an in-memory store and inherits the
// default Read, GetToFile and PutFromFile bodies, so the suite checks those.
class DefaultMethodsStore : public ObjectStore {
 public:
  absl::StatusOr<std::vector<ObjectInfo>> List(std::string_view prefix) override {
    return inner_->List(prefix);
  }
  absl::StatusOr<std::string> Get(std::string_view uri) override { return inner_->Get(uri); }
  absl::Status Put(std::string_view uri, std::string_view data) override {
    return inner_->Put(uri, data);
  }
  absl::Status Delete(std::string_view uri) override { return inner_->Delete(uri); }

 private:
  std::unique_ptr<ObjectStore> inner_ = NewInMemoryObjectStore();
};

struct FileStoreKind {
  static std::unique_ptr<ObjectStore> New(const TempDir&) { return NewFileObjectStore(); }
  static std::string Root(const TempDir& dir) {
    return absl::StrCat("file://", dir.path(), "/store/");
  }
};
// A file store confined to the suite's folder: inside it, it behaves as the
// unconfined one.
struct ConfinedFileStoreKind {
  static std::unique_ptr<ObjectStore> New(const TempDir& dir) {
    const std::string root = absl::StrCat(dir.path(), "/store");
    fs::create_directories(root);
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        NewFileObjectStore(FileObjectStoreOptions{{root}});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : NewFileObjectStore();
  }
  static std::string Root(const TempDir& dir) { return FileStoreKind::Root(dir); }
};
struct InMemoryStoreKind {
  static std::unique_ptr<ObjectStore> New(const TempDir&) { return NewInMemoryObjectStore(); }
  static std::string Root(const TempDir&) { return "mem://bucket/store/"; }
};
struct DefaultMethodsStoreKind {
  static std::unique_ptr<ObjectStore> New(const TempDir&) {
    return std::make_unique<DefaultMethodsStore>();
  }
  static std::string Root(const TempDir&) { return "s3://bucket/store/"; }
};

template <typename Kind>
class ObjectStoreConformanceTest : public ::testing::Test {
 protected:
  std::string Uri(const std::string& key) const { return absl::StrCat(root_, key); }
  std::string LocalPath(const std::string& name) const {
    return absl::StrCat(dir_.path(), "/local/", name);
  }

  TempDir dir_;
  std::unique_ptr<ObjectStore> store_ = Kind::New(dir_);
  std::string root_ = Kind::Root(dir_);
};

using StoreKinds = ::testing::Types<FileStoreKind, ConfinedFileStoreKind, InMemoryStoreKind,
                                    DefaultMethodsStoreKind>;
class StoreKindNames {
 public:
  template <typename T>
  static std::string GetName(int) {
    if (std::is_same_v<T, FileStoreKind>) return "File";
    if (std::is_same_v<T, ConfinedFileStoreKind>) return "ConfinedFile";
    if (std::is_same_v<T, InMemoryStoreKind>) return "InMemory";
    return "DefaultMethods";
  }
};
TYPED_TEST_SUITE(ObjectStoreConformanceTest, StoreKinds, StoreKindNames);

TYPED_TEST(ObjectStoreConformanceTest, PutThenGetReturnsTheData) {
  ASSERT_TRUE(this->store_->Put(this->Uri("a/b.txt"), "hello").ok());
  absl::StatusOr<std::string> got = this->store_->Get(this->Uri("a/b.txt"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hello");
}

TYPED_TEST(ObjectStoreConformanceTest, PutReplacesTheObject) {
  ASSERT_TRUE(this->store_->Put(this->Uri("x"), "a much longer first version").ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("x"), "short").ok());
  EXPECT_EQ(this->store_->Get(this->Uri("x")).value_or("?"), "short");
  absl::StatusOr<std::vector<ObjectInfo>> listed = this->store_->List(this->root_);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].size, 5);
}

TYPED_TEST(ObjectStoreConformanceTest, MissingObjectIsNotFoundEverywhere) {
  std::string uri = this->Uri("missing/object");
  absl::StatusOr<std::string> got = this->store_->Get(uri);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(got.status().message(), HasSubstr(uri));
  int chunks = 0;
  absl::Status read = this->store_->Read(uri, [&](std::string_view) {
    ++chunks;
    return absl::OkStatus();
  });
  EXPECT_EQ(read.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(chunks, 0);
  std::string local = this->LocalPath("never");
  EXPECT_EQ(this->store_->GetToFile(uri, local).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(local));
}

// Keys are input (manifests, channel URIs, a container's checkpoint files): a
// message that names one shows it escaped and cut, so that no key can add a
// line to a log, forge text after it, or make the message long. Plain keys
// read as written (the tests above).
TYPED_TEST(ObjectStoreConformanceTest, KeysInErrorsAreShownEscapedAndCut) {
  auto one_line = [](absl::string_view message) {
    return message.find_first_of("\n\x1b\xff") == absl::string_view::npos;
  };
  const std::string odd = this->Uri("a\nb'c\"d\xff" "e");
  const std::string shown = this->Uri(R"(a\nb'c"d\xFFe)");
  absl::StatusOr<std::string> got = this->store_->Get(odd);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(one_line(got.status().message())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(absl::StrCat("'", shown, "' not found")));
  absl::StatusOr<std::string> range = this->store_->ReadRange(odd, -1, 1);
  EXPECT_EQ(range.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(range.status().message(), HasSubstr(absl::StrCat("reading '", shown, "'")));
  absl::StatusOr<std::vector<ObjectInfo>> first = this->store_->ListFirst(odd, 0);
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(first.status().message(), HasSubstr(absl::StrCat("listing '", shown, "'")));
  absl::Status put = this->store_->Put("no scheme\x1b[2J\n", "x");
  EXPECT_EQ(put.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(put.message(), HasSubstr(R"('no scheme\u001b[2J\n')"));

  // A key of 5000 bytes: the message keeps the first 1024 of the URI.
  const std::string long_uri = this->Uri(std::string(5000, 'k'));
  got = this->store_->Get(long_uri);
  EXPECT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(),
              HasSubstr(absl::StrCat("'", long_uri.substr(0, 1024), "...'")));
  EXPECT_LT(got.status().message().size(), 1024u + 100u) << got.status();
}

TYPED_TEST(ObjectStoreConformanceTest, DeleteRemovesTheObject) {
  ASSERT_TRUE(this->store_->Put(this->Uri("gone"), "x").ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("kept"), "y").ok());
  ASSERT_TRUE(this->store_->Delete(this->Uri("gone")).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("gone")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Uris(this->store_->List(this->root_).value()), ElementsAre(this->Uri("kept")));
}

// A key whose objects below were all deleted can be an object itself (as
// on S3; a file store is left with an empty directory there).
TYPED_TEST(ObjectStoreConformanceTest, AKeyCanBeAnObjectOnceTheObjectsBelowItAreDeleted) {
  ASSERT_TRUE(this->store_->Put(this->Uri("a/inside"), "1").ok());
  ASSERT_TRUE(this->store_->Delete(this->Uri("a/inside")).ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("a"), "2").ok());
  EXPECT_EQ(this->store_->Get(this->Uri("a")).value_or(""), "2");
  ASSERT_TRUE(this->store_->Put(this->Uri("b/inside"), "1").ok());
  ASSERT_TRUE(this->store_->Delete(this->Uri("b/inside")).ok());
  const std::string local = this->LocalPath("b");
  ASSERT_TRUE(this->store_->Put(this->Uri("local-b"), "3").ok());
  ASSERT_TRUE(this->store_->GetToFile(this->Uri("local-b"), local).ok());
  ASSERT_TRUE(this->store_->PutFromFile(this->Uri("b"), local).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("b")).value_or(""), "3");
  // Deeper: the objects were further down (a file store keeps their folders).
  for (const char* key : {"c/x/y", "c/x/z/w", "c/v"}) {
    ASSERT_TRUE(this->store_->Put(this->Uri(key), "1").ok());
    ASSERT_TRUE(this->store_->Delete(this->Uri(key)).ok());
  }
  ASSERT_TRUE(this->store_->Put(this->Uri("c"), "4").ok());
  EXPECT_EQ(this->store_->Get(this->Uri("c")).value_or(""), "4");
  ASSERT_TRUE(this->store_->Put(this->Uri("d/x/y"), "1").ok());
  ASSERT_TRUE(this->store_->Delete(this->Uri("d/x/y")).ok());
  ASSERT_TRUE(this->store_->PutFromFile(this->Uri("d"), local).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("d")).value_or(""), "3");
}

TYPED_TEST(ObjectStoreConformanceTest, DeleteOfMissingObjectIsOk) {
  EXPECT_TRUE(this->store_->Delete(this->Uri("never/was")).ok());
}

TYPED_TEST(ObjectStoreConformanceTest, ListIsSortedByUriWithSizes) {
  ASSERT_TRUE(this->store_->Put(this->Uri("b/2"), "22").ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("a"), "").ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("b/1"), "1").ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("a-z/deep/er/file"), "4444").ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("B"), "333").ok());
  absl::StatusOr<std::vector<ObjectInfo>> listed = this->store_->List(this->root_);
  ASSERT_TRUE(listed.ok()) << listed.status();
  // Byte order: 'B' < 'a' < "a-z" < "b/1" < "b/2".
  EXPECT_THAT(Uris(*listed),
              ElementsAre(this->Uri("B"), this->Uri("a"), this->Uri("a-z/deep/er/file"),
                          this->Uri("b/1"), this->Uri("b/2")));
  std::vector<int64_t> sizes;
  for (const ObjectInfo& info : *listed) sizes.push_back(info.size);
  EXPECT_THAT(sizes, ElementsAre(3, 0, 4, 1, 2));
}

TYPED_TEST(ObjectStoreConformanceTest, PrefixIsAStringPrefixNotADirectory) {
  for (const char* key : {"train/x", "train/sub/y", "trace.txt", "tr", "other/z", "t"}) {
    ASSERT_TRUE(this->store_->Put(this->Uri(key), key).ok()) << key;
  }
  EXPECT_THAT(Uris(this->store_->List(this->Uri("tr")).value()),
              ElementsAre(this->Uri("tr"), this->Uri("trace.txt"), this->Uri("train/sub/y"),
                          this->Uri("train/x")));
  EXPECT_THAT(Uris(this->store_->List(this->Uri("train/")).value()),
              ElementsAre(this->Uri("train/sub/y"), this->Uri("train/x")));
  EXPECT_THAT(Uris(this->store_->List(this->Uri("trace.txt")).value()),
              ElementsAre(this->Uri("trace.txt")));
  EXPECT_THAT(Uris(this->store_->List(this->Uri("train/s")).value()),
              ElementsAre(this->Uri("train/sub/y")));
}

TYPED_TEST(ObjectStoreConformanceTest, ListFirstIsTheStartOfTheListing) {
  for (const char* key : {"train/x", "train/sub/y", "trace.txt", "tr", "other/z", "t"}) {
    ASSERT_TRUE(this->store_->Put(this->Uri(key), key).ok()) << key;
  }
  EXPECT_THAT(Uris(this->store_->ListFirst(this->Uri("tr"), 2).value()),
              ElementsAre(this->Uri("tr"), this->Uri("trace.txt")));
  EXPECT_THAT(Uris(this->store_->ListFirst(this->Uri("train/"), 1).value()),
              ElementsAre(this->Uri("train/sub/y")));
  // More than there are: all of them, as List.
  EXPECT_THAT(Uris(this->store_->ListFirst(this->root_, 100).value()),
              ElementsAreArray(Uris(this->store_->List(this->root_).value())));
  // An object is the first under its own URI; a missing one is not there.
  EXPECT_THAT(Uris(this->store_->ListFirst(this->Uri("t"), 1).value()), ElementsAre(this->Uri("t")));
  EXPECT_THAT(this->store_->ListFirst(this->Uri("nothing/"), 1).value(), IsEmpty());
  absl::StatusOr<std::vector<ObjectInfo>> none = this->store_->ListFirst(this->root_, 0);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr(this->root_));
}

TYPED_TEST(ObjectStoreConformanceTest, ListOfUnknownPrefixIsEmpty) {
  ASSERT_TRUE(this->store_->Put(this->Uri("a/b"), "x").ok());
  absl::StatusOr<std::vector<ObjectInfo>> listed = this->store_->List(this->Uri("nothing/here/"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, IsEmpty());
  listed = this->store_->List(this->Uri("a/b/c"));  // below an object
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, IsEmpty());
}

TYPED_TEST(ObjectStoreConformanceTest, BinaryDataWithNulsRoundTrips) {
  std::string data("\0a\0\0b\xff\x80\n\r\0", 10);
  ASSERT_TRUE(this->store_->Put(this->Uri("bin"), data).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("bin")).value_or(""), data);
  EXPECT_EQ(this->store_->List(this->Uri("bin")).value().at(0).size, 10);
  std::string path = this->LocalPath("bin");
  ASSERT_TRUE(this->store_->GetToFile(this->Uri("bin"), path).ok());
  EXPECT_EQ(ReadLocal(path), data);
}

TYPED_TEST(ObjectStoreConformanceTest, EmptyObjectRoundTrips) {
  ASSERT_TRUE(this->store_->Put(this->Uri("empty"), "").ok());
  EXPECT_EQ(this->store_->Get(this->Uri("empty")).value_or("?"), "");
  std::string streamed;
  ASSERT_TRUE(this->store_
                  ->Read(this->Uri("empty"),
                         [&](std::string_view chunk) {
                           streamed.append(chunk);
                           return absl::OkStatus();
                         })
                  .ok());
  EXPECT_EQ(streamed, "");
  std::string path = this->LocalPath("empty");
  ASSERT_TRUE(this->store_->GetToFile(this->Uri("empty"), path).ok());
  EXPECT_TRUE(fs::is_regular_file(path));
  EXPECT_EQ(fs::file_size(path), 0u);
}

TYPED_TEST(ObjectStoreConformanceTest, LargeObjectRoundTripsThroughEveryPath) {
  const std::string data = Pattern(10 * 1000 * 1000, 7);
  ASSERT_TRUE(this->store_->Put(this->Uri("big"), data).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("big")).value_or("") == data, true);
  EXPECT_EQ(this->store_->List(this->Uri("big")).value().at(0).size, 10 * 1000 * 1000);

  std::string streamed;
  int chunks = 0;
  ASSERT_TRUE(this->store_
                  ->Read(this->Uri("big"),
                         [&](std::string_view chunk) {
                           EXPECT_FALSE(chunk.empty());
                           streamed.append(chunk);
                           ++chunks;
                           return absl::OkStatus();
                         })
                  .ok());
  EXPECT_TRUE(streamed == data) << "streamed " << streamed.size() << " bytes in " << chunks;

  std::string path = this->LocalPath("deep/er/big.bin");  // parents created
  ASSERT_TRUE(this->store_->GetToFile(this->Uri("big"), path).ok());
  EXPECT_TRUE(ReadLocal(path) == data);

  const std::string other = Pattern(10 * 1000 * 1000 + 3, 8);
  std::string source = this->LocalPath("source.bin");
  WriteLocal(source, other);
  ASSERT_TRUE(this->store_->PutFromFile(this->Uri("from-file"), source).ok());
  EXPECT_TRUE(this->store_->Get(this->Uri("from-file")).value_or("") == other);
}

TYPED_TEST(ObjectStoreConformanceTest, ReadRangeReturnsTheRangeClampedToTheEnd) {
  const std::string data = Pattern(3 * 1000 * 1000 + 17, 5);
  ASSERT_TRUE(this->store_->Put(this->Uri("r"), data).ok());
  const std::string uri = this->Uri("r");
  EXPECT_TRUE(this->store_->ReadRange(uri, 0, 10).value_or("?") == data.substr(0, 10));
  EXPECT_TRUE(this->store_->ReadRange(uri, 1234567, 1 << 20).value_or("?") ==
              data.substr(1234567, 1 << 20));
  // Past the end: what there is; at or beyond the end: nothing.
  EXPECT_TRUE(this->store_->ReadRange(uri, 3 * 1000 * 1000, 1000).value_or("?") ==
              data.substr(3 * 1000 * 1000));
  EXPECT_EQ(this->store_->ReadRange(uri, static_cast<int64_t>(data.size()), 5).value_or("?"), "");
  EXPECT_EQ(this->store_->ReadRange(uri, static_cast<int64_t>(data.size()) + 9, 5).value_or("?"),
            "");
  EXPECT_EQ(this->store_->ReadRange(uri, 7, 0).value_or("?"), "");
  ASSERT_TRUE(this->store_->Put(this->Uri("empty"), "").ok());
  EXPECT_EQ(this->store_->ReadRange(this->Uri("empty"), 0, 100).value_or("?"), "");
}

TYPED_TEST(ObjectStoreConformanceTest, ReadRangeErrors) {
  ASSERT_TRUE(this->store_->Put(this->Uri("r"), "abc").ok());
  EXPECT_TRUE(absl::IsNotFound(this->store_->ReadRange(this->Uri("missing"), 0, 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(this->store_->ReadRange(this->Uri("r"), -1, 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(this->store_->ReadRange(this->Uri("r"), 0, -1).status()));
}

TYPED_TEST(ObjectStoreConformanceTest, SinkErrorStopsReadAndIsReturned) {
  ASSERT_TRUE(this->store_->Put(this->Uri("big"), Pattern(3 * 1024 * 1024, 1)).ok());
  int chunks = 0;
  absl::Status status = this->store_->Read(this->Uri("big"), [&](std::string_view) {
    ++chunks;
    return absl::CancelledError("reader gave up");
  });
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(status.message(), "reader gave up");
  EXPECT_EQ(chunks, 1);
}

TYPED_TEST(ObjectStoreConformanceTest, GetToFileReplacesAnExistingFile) {
  std::string path = this->LocalPath("target");
  WriteLocal(path, "an old and longer local file");
  ASSERT_TRUE(this->store_->Put(this->Uri("obj"), "new").ok());
  ASSERT_TRUE(this->store_->GetToFile(this->Uri("obj"), path).ok());
  EXPECT_EQ(ReadLocal(path), "new");
  EXPECT_THAT(DirEntries(this->LocalPath("")), ElementsAre("target"));  // no temporary left
}

TYPED_TEST(ObjectStoreConformanceTest, PutFromFileStoresTheFile) {
  std::string path = this->LocalPath("in.txt");
  WriteLocal(path, std::string("line\0two", 8));
  ASSERT_TRUE(this->store_->PutFromFile(this->Uri("up/in.txt"), path).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("up/in.txt")).value_or(""), std::string("line\0two", 8));
}

TYPED_TEST(ObjectStoreConformanceTest, PutFromMissingFileIsNotFoundNamingThePath) {
  std::string path = this->LocalPath("no-such-file");
  absl::Status status = this->store_->PutFromFile(this->Uri("x"), path);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_EQ(this->store_->Get(this->Uri("x")).status().code(), absl::StatusCode::kNotFound);
}

TYPED_TEST(ObjectStoreConformanceTest, ReadersSeeTheOldOrTheNewObjectNeverAPart) {
  const std::string a(1 << 20, 'a');
  const std::string b((1 << 20) + 17, 'b');
  ASSERT_TRUE(this->store_->Put(this->Uri("hot"), a).ok());
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; i < 40 && !stop; ++i) {
      EXPECT_TRUE(this->store_->Put(this->Uri("hot"), i % 2 == 0 ? b : a).ok());
    }
    stop = true;
  });
  int reads = 0;
  while (!stop || reads < 5) {
    absl::StatusOr<std::string> got = this->store_->Get(this->Uri("hot"));
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_TRUE(*got == a || *got == b) << "torn read of " << got->size() << " bytes";
    ++reads;
  }
  writer.join();
}

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
