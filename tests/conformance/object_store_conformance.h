// The ObjectStore conformance suite: the contract of kiln/object_store.h, a typed suite run
// against every implementation. A binary instantiates it with its store kinds:
//
//   struct MyStoreKind {
//     // OK, or why this store cannot be tested here (the tests then skip, saying so).
//     static absl::Status Available();
//     // A fresh store, or null when Available() fails.
//     static std::unique_ptr<ObjectStore> New(const TempDir& dir);
//     // The URI prefix (ending in '/') under which a test's objects go, empty at its start.
//     static std::string Root(const TempDir& dir);
//   };
//   INSTANTIATE_TYPED_TEST_SUITE_P(My, ObjectStoreConformanceTest, MyStoreKind);
//
// tests/conformance/object_store_conformance_test.cc instantiates it for the file, in-memory
// and default-method stores; tests/aws/s3_object_store_test.cc for S3 on moto.
#ifndef KILN_TESTS_CONFORMANCE_OBJECT_STORE_CONFORMANCE_H_
#define KILN_TESTS_CONFORMANCE_OBJECT_STORE_CONFORMANCE_H_

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "conformance/object_store_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/object_store.h"

namespace kiln::store_testing {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

template <typename Kind>
class ObjectStoreConformanceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = Kind::Available(); !s.ok()) GTEST_SKIP() << s;
    ASSERT_NE(store_, nullptr);
  }

  std::string Uri(const std::string& key) const { return absl::StrCat(root_, key); }
  std::string LocalPath(const std::string& name) const {
    return absl::StrCat(dir_.path(), "/local/", name);
  }

  TempDir dir_;
  std::unique_ptr<ObjectStore> store_ = Kind::New(dir_);
  std::string root_ = Kind::Root(dir_);
};

TYPED_TEST_SUITE_P(ObjectStoreConformanceTest);

TYPED_TEST_P(ObjectStoreConformanceTest, PutThenGetReturnsTheData) {
  ASSERT_TRUE(this->store_->Put(this->Uri("a/b.txt"), "hello").ok());
  absl::StatusOr<std::string> got = this->store_->Get(this->Uri("a/b.txt"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "hello");
}

TYPED_TEST_P(ObjectStoreConformanceTest, PutReplacesTheObject) {
  ASSERT_TRUE(this->store_->Put(this->Uri("x"), "a much longer first version").ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("x"), "short").ok());
  EXPECT_EQ(this->store_->Get(this->Uri("x")).value_or("?"), "short");
  absl::StatusOr<std::vector<ObjectInfo>> listed = this->store_->List(this->root_);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].size, 5);
}

TYPED_TEST_P(ObjectStoreConformanceTest, MissingObjectIsNotFoundEverywhere) {
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
TYPED_TEST_P(ObjectStoreConformanceTest, KeysInErrorsAreShownEscapedAndCut) {
  auto one_line = [](absl::string_view message) {
    return message.find_first_of("\n\x1b\xff") == absl::string_view::npos;
  };
  const std::string odd = this->Uri("a\nb'c\"d\xff" "e");
  const std::string shown = this->Uri(R"(a\nb'c"d\xFFe)");
  absl::StatusOr<std::string> got = this->store_->Get(odd);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(one_line(got.status().message())) << got.status();
  // (How a store words "not found" is its own: the file and in-memory stores say "'<uri>' not
  // found", S3 "GET <uri>: HTTP 404".)
  EXPECT_THAT(got.status().message(), HasSubstr(shown));
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
  EXPECT_THAT(got.status().message(), HasSubstr(absl::StrCat(long_uri.substr(0, 1024), "...")));
  EXPECT_THAT(got.status().message(), Not(HasSubstr(long_uri.substr(0, 1025))));
  EXPECT_LT(got.status().message().size(), 1024u + 100u) << got.status();
}

TYPED_TEST_P(ObjectStoreConformanceTest, DeleteRemovesTheObject) {
  ASSERT_TRUE(this->store_->Put(this->Uri("gone"), "x").ok());
  ASSERT_TRUE(this->store_->Put(this->Uri("kept"), "y").ok());
  ASSERT_TRUE(this->store_->Delete(this->Uri("gone")).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("gone")).status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Uris(this->store_->List(this->root_).value()), ElementsAre(this->Uri("kept")));
}

// A key whose objects below were all deleted can be an object itself (as
// on S3; a file store is left with an empty directory there).
TYPED_TEST_P(ObjectStoreConformanceTest, AKeyCanBeAnObjectOnceTheObjectsBelowItAreDeleted) {
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

TYPED_TEST_P(ObjectStoreConformanceTest, DeleteOfMissingObjectIsOk) {
  EXPECT_TRUE(this->store_->Delete(this->Uri("never/was")).ok());
}

TYPED_TEST_P(ObjectStoreConformanceTest, ListIsSortedByUriWithSizes) {
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

TYPED_TEST_P(ObjectStoreConformanceTest, PrefixIsAStringPrefixNotADirectory) {
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

TYPED_TEST_P(ObjectStoreConformanceTest, ListFirstIsTheStartOfTheListing) {
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

TYPED_TEST_P(ObjectStoreConformanceTest, ListOfUnknownPrefixIsEmpty) {
  ASSERT_TRUE(this->store_->Put(this->Uri("a/b"), "x").ok());
  absl::StatusOr<std::vector<ObjectInfo>> listed = this->store_->List(this->Uri("nothing/here/"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, IsEmpty());
  listed = this->store_->List(this->Uri("a/b/c"));  // below an object
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_THAT(*listed, IsEmpty());
}

TYPED_TEST_P(ObjectStoreConformanceTest, BinaryDataWithNulsRoundTrips) {
  std::string data("\0a\0\0b\xff\x80\n\r\0", 10);
  ASSERT_TRUE(this->store_->Put(this->Uri("bin"), data).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("bin")).value_or(""), data);
  EXPECT_EQ(this->store_->List(this->Uri("bin")).value().at(0).size, 10);
  std::string path = this->LocalPath("bin");
  ASSERT_TRUE(this->store_->GetToFile(this->Uri("bin"), path).ok());
  EXPECT_EQ(ReadLocal(path), data);
}

TYPED_TEST_P(ObjectStoreConformanceTest, EmptyObjectRoundTrips) {
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

TYPED_TEST_P(ObjectStoreConformanceTest, LargeObjectRoundTripsThroughEveryPath) {
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

TYPED_TEST_P(ObjectStoreConformanceTest, ReadRangeReturnsTheRangeClampedToTheEnd) {
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

TYPED_TEST_P(ObjectStoreConformanceTest, ReadRangeErrors) {
  ASSERT_TRUE(this->store_->Put(this->Uri("r"), "abc").ok());
  EXPECT_TRUE(absl::IsNotFound(this->store_->ReadRange(this->Uri("missing"), 0, 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(this->store_->ReadRange(this->Uri("r"), -1, 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(this->store_->ReadRange(this->Uri("r"), 0, -1).status()));
}

TYPED_TEST_P(ObjectStoreConformanceTest, SinkErrorStopsReadAndIsReturned) {
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

TYPED_TEST_P(ObjectStoreConformanceTest, GetToFileReplacesAnExistingFile) {
  std::string path = this->LocalPath("target");
  WriteLocal(path, "an old and longer local file");
  ASSERT_TRUE(this->store_->Put(this->Uri("obj"), "new").ok());
  ASSERT_TRUE(this->store_->GetToFile(this->Uri("obj"), path).ok());
  EXPECT_EQ(ReadLocal(path), "new");
  EXPECT_THAT(DirEntries(this->LocalPath("")), ElementsAre("target"));  // no temporary left
}

TYPED_TEST_P(ObjectStoreConformanceTest, PutFromFileStoresTheFile) {
  std::string path = this->LocalPath("in.txt");
  WriteLocal(path, std::string("line\0two", 8));
  ASSERT_TRUE(this->store_->PutFromFile(this->Uri("up/in.txt"), path).ok());
  EXPECT_EQ(this->store_->Get(this->Uri("up/in.txt")).value_or(""), std::string("line\0two", 8));
}

TYPED_TEST_P(ObjectStoreConformanceTest, PutFromMissingFileIsNotFoundNamingThePath) {
  std::string path = this->LocalPath("no-such-file");
  absl::Status status = this->store_->PutFromFile(this->Uri("x"), path);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(path));
  EXPECT_EQ(this->store_->Get(this->Uri("x")).status().code(), absl::StatusCode::kNotFound);
}

TYPED_TEST_P(ObjectStoreConformanceTest, ReadersSeeTheOldOrTheNewObjectNeverAPart) {
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

REGISTER_TYPED_TEST_SUITE_P(ObjectStoreConformanceTest,
                           PutThenGetReturnsTheData,
                           PutReplacesTheObject,
                           MissingObjectIsNotFoundEverywhere,
                           KeysInErrorsAreShownEscapedAndCut,
                           DeleteRemovesTheObject,
                           AKeyCanBeAnObjectOnceTheObjectsBelowItAreDeleted,
                           DeleteOfMissingObjectIsOk,
                           ListIsSortedByUriWithSizes,
                           PrefixIsAStringPrefixNotADirectory,
                           ListFirstIsTheStartOfTheListing,
                           ListOfUnknownPrefixIsEmpty,
                           BinaryDataWithNulsRoundTrips,
                           EmptyObjectRoundTrips,
                           LargeObjectRoundTripsThroughEveryPath,
                           ReadRangeReturnsTheRangeClampedToTheEnd,
                           ReadRangeErrors,
                           SinkErrorStopsReadAndIsReturned,
                           GetToFileReplacesAnExistingFile,
                           PutFromFileStoresTheFile,
                           PutFromMissingFileIsNotFoundNamingThePath,
                           ReadersSeeTheOldOrTheNewObjectNeverAPart);

}  // namespace kiln::store_testing

#endif  // KILN_TESTS_CONFORMANCE_OBJECT_STORE_CONFORMANCE_H_
