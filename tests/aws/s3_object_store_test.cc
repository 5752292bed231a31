// The S3 object store against a real S3 endpoint: a moto server started by
// the test, with signature checking on, and the aws CLI as an independent
// client that seeds buckets and reads back what Kiln wrote. Faults come from
// a proxy between the store and moto.
#include <dirent.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "aws/internal/s3_client.h"
#include "aws/tests_util.h"
#include "aws/fault_proxy.h"
#include "aws/moto_server.h"
#include "conformance/object_store_conformance.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/aws/s3.h"
#include "kiln/checkpoint_sync.h"
#include "kiln/object_store.h"

namespace kiln::aws {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::FaultProxy;
using testing::MotoServer;
using testing::RandomBytes;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

constexpr char kBucket[] = "kiln-test";

// One moto server for the whole program (it takes seconds to start), shared by the tests
// below and the conformance suite; every test resets it. Stopped at exit.
struct SharedMotoServer {
  MotoServer server;
  absl::Status start_status = server.Start();
};
SharedMotoServer& SharedMoto() {
  static SharedMotoServer moto;
  return moto;
}

class S3ObjectStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { Reset(true); }

  void Reset(bool check_signatures) {
    ASSERT_TRUE(SharedMoto().start_status.ok()) << SharedMoto().start_status;
    auto key = moto_.Reset(check_signatures);
    ASSERT_TRUE(key.ok()) << key.status();
    key_ = *key;
    internal::S3ClientOptions c;
    c.endpoint = moto_.endpoint();
    c.credentials = {key_.access_key_id, key_.secret_access_key, ""};
    direct_ = std::make_unique<internal::S3Client>(c);
    ASSERT_TRUE(direct_->CreateBucket(kBucket).ok());
    proxy_ = std::make_unique<FaultProxy>(moto_.port());
  }

  // A store talking to moto directly, or through the fault proxy.
  std::unique_ptr<ObjectStore> Store(bool through_proxy = false,
                                     void (*tweak)(S3Options&) = nullptr) {
    S3Options o = moto_.Options(key_);
    if (through_proxy) o.endpoint_url = proxy_->endpoint();
    o.part_size = 5 << 20;
    o.multipart_threshold = 5 << 20;
    if (tweak != nullptr) tweak(o);
    auto store = NewS3ObjectStore(o);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  // aws s3 cp LOCAL s3://kiln-test/KEY
  void SeedWithCli(const std::string& local, const std::string& key) {
    std::string out;
    ASSERT_EQ(moto_.Aws(key_, {"s3", "cp", "--quiet", local, absl::StrCat("s3://", kBucket, "/", key)},
                        &out),
              0)
        << out;
  }
  std::string ReadWithCli(const std::string& key) {
    std::string dest = tmp_.path() + "/cli-read";
    std::string out;
    EXPECT_EQ(moto_.Aws(key_, {"s3", "cp", "--quiet", absl::StrCat("s3://", kBucket, "/", key), dest},
                        &out),
              0)
        << out;
    return ReadFile(dest);
  }
  static std::string Uri(const std::string& key) { return absl::StrCat("s3://", kBucket, "/", key); }
  // The multipart uploads in progress in kBucket, as the CLI lists them.
  std::string MultipartUploads() {
    std::string out;
    EXPECT_EQ(moto_.Aws(key_, {"s3api", "list-multipart-uploads", "--bucket", kBucket, "--output",
                               "json"},
                        &out),
              0)
        << out;
    return out;
  }
  // CompleteMultipartUpload requests the proxy has seen (POST ...?uploadId=;
  // CreateMultipartUpload is POST ...?uploads).
  int CompleteRequests() { return proxy_->RequestsMatching("POST", kComplete); }
  static constexpr char kComplete[] = "?uploadId=";
  // Retries that wait milliseconds, for tests that spend every attempt.
  static void FastRetries(S3Options& o) {
    o.retry_base_delay = absl::Milliseconds(5);
    o.retry_max_delay = absl::Milliseconds(50);
  }

  MotoServer& moto_ = SharedMoto().server;
  AwsCredentials key_;
  TempDir tmp_;
  std::unique_ptr<internal::S3Client> direct_;
  std::unique_ptr<FaultProxy> proxy_;
};

TEST_F(S3ObjectStoreTest, ObjectsSeededByTheCliAreListedReadAndDeleted) {
  Reset(/*check_signatures=*/false);  // a nested prefix (see MotoServer::Reset)
  WriteFile(tmp_.path() + "/a.csv", "1,2,3\n");
  WriteFile(tmp_.path() + "/b.csv", std::string(70000, 'b'));
  SeedWithCli(tmp_.path() + "/a.csv", "data/train/a.csv");
  SeedWithCli(tmp_.path() + "/b.csv", "data/train/sub dir/b=c.csv");
  SeedWithCli(tmp_.path() + "/a.csv", "data/train-other/x.csv");
  auto store = Store();
  auto listed = store->List(Uri("data/train/"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].uri, Uri("data/train/a.csv"));
  EXPECT_EQ((*listed)[0].size, 6);
  EXPECT_EQ((*listed)[1].uri, Uri("data/train/sub dir/b=c.csv"));
  EXPECT_EQ((*listed)[1].size, 70000);
  // A prefix without '/' matches the sibling too.
  EXPECT_EQ(store->List(Uri("data/train"))->size(), 3u);
  EXPECT_EQ(*store->Get(Uri("data/train/a.csv")), "1,2,3\n");
  EXPECT_EQ(*store->Get(Uri("data/train/sub dir/b=c.csv")), std::string(70000, 'b'));
  ASSERT_TRUE(store->Delete(Uri("data/train/a.csv")).ok());
  ASSERT_TRUE(store->Delete(Uri("data/train/a.csv")).ok());  // already gone: OK
  absl::StatusOr<std::string> gone = store->Get(Uri("data/train/a.csv"));
  EXPECT_TRUE(absl::IsNotFound(gone.status())) << gone.status();
  EXPECT_THAT(gone.status().message(), HasSubstr(Uri("data/train/a.csv")));
}

TEST_F(S3ObjectStoreTest, PutIsReadBackByTheCliByteForByte) {
  auto store = Store();
  std::string data = RandomBytes(300000, 1);
  ASSERT_TRUE(store->Put(Uri("out/model.bin"), data).ok());
  EXPECT_EQ(ReadWithCli("out/model.bin"), data);
  ASSERT_TRUE(store->Put(Uri("out/empty"), "").ok());
  EXPECT_EQ(ReadWithCli("out/empty"), "");
}

TEST_F(S3ObjectStoreTest, LargeFilesGoUpAsMultipartAndComeDownAsParallelRanges) {
  const std::string data = RandomBytes((23 << 20) + 12345, 2);
  WriteFile(tmp_.path() + "/big.bin", data);
  auto store = Store();
  ASSERT_TRUE(store->PutFromFile(Uri("models/big.bin"), tmp_.path() + "/big.bin").ok());
  // S3 gives multipart objects an ETag "<md5 of the part md5s>-<parts>".
  std::string head;
  ASSERT_EQ(moto_.Aws(key_, {"s3api", "head-object", "--bucket", kBucket, "--key", "models/big.bin"},
                      &head),
            0)
      << head;
  EXPECT_THAT(head, HasSubstr("-5\\\""));
  EXPECT_EQ(ReadWithCli("models/big.bin"), data);
  // Seeded by the CLI (its own multipart upload), downloaded in ranges.
  SeedWithCli(tmp_.path() + "/big.bin", "data/big.bin");
  ASSERT_TRUE(store->GetToFile(Uri("data/big.bin"), tmp_.path() + "/down/big.bin").ok());
  EXPECT_EQ(ReadFile(tmp_.path() + "/down/big.bin"), data);
  EXPECT_THAT(testing::ListDir(tmp_.path() + "/down"), ElementsAre("big.bin"));
}

TEST_F(S3ObjectStoreTest, EmptyAndSmallObjectsDownloadToFiles) {
  auto store = Store();
  ASSERT_TRUE(store->Put(Uri("e/empty"), "").ok());
  ASSERT_TRUE(store->Put(Uri("e/small"), "abc").ok());
  ASSERT_TRUE(store->GetToFile(Uri("e/empty"), tmp_.path() + "/x/empty").ok());
  ASSERT_TRUE(store->GetToFile(Uri("e/small"), tmp_.path() + "/x/small").ok());
  EXPECT_EQ(ReadFile(tmp_.path() + "/x/empty"), "");
  EXPECT_EQ(ReadFile(tmp_.path() + "/x/small"), "abc");
  absl::Status missing = store->GetToFile(Uri("e/none"), tmp_.path() + "/x/none");
  EXPECT_TRUE(absl::IsNotFound(missing)) << missing;
  EXPECT_THAT(testing::ListDir(tmp_.path() + "/x"), ElementsAre("empty", "small"));
}

TEST_F(S3ObjectStoreTest, ReadStreamsTheObjectInOrderedChunks) {
  auto store = Store();
  const std::string data = RandomBytes(3 << 20, 3);
  ASSERT_TRUE(store->Put(Uri("stream/part-0"), data).ok());
  std::string got;
  int chunks = 0;
  ASSERT_TRUE(store
                  ->Read(Uri("stream/part-0"),
                         [&](std::string_view chunk) {
                           ++chunks;
                           EXPECT_LE(chunk.size(), 512u * 1024);
                           got.append(chunk);
                           return absl::OkStatus();
                         })
                  .ok());
  EXPECT_EQ(got, data);
  EXPECT_GE(chunks, 6);
  // A sink error stops the read and is returned.
  absl::Status stopped = store->Read(Uri("stream/part-0"), [](std::string_view) {
    return absl::CancelledError("reader went away");
  });
  EXPECT_TRUE(absl::IsCancelled(stopped)) << stopped;
}

TEST_F(S3ObjectStoreTest, ReadRangeSendsOneRangedGetAndClampsToTheEnd) {
  auto store = Store(/*through_proxy=*/true);
  const std::string data = RandomBytes(3 << 20, 5);
  ASSERT_TRUE(store->Put(Uri("range/obj"), data).ok());
  ASSERT_TRUE(store->Put(Uri("range/empty"), "").ok());
  absl::Mutex mu;
  std::vector<std::string> heads;
  proxy_->OnRequest([&](const std::string& head) {
    absl::MutexLock lock(&mu);
    heads.push_back(head);
  });
  absl::StatusOr<std::string> got = store->ReadRange(Uri("range/obj"), 1000000, 4096);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == data.substr(1000000, 4096));
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(heads.size(), 1u);
    EXPECT_THAT(absl::AsciiStrToLower(heads[0]), HasSubstr("range: bytes=1000000-1004095"));
  }
  // Past the end: the rest; at or beyond the end (and in an empty object):
  // nothing.
  EXPECT_TRUE(store->ReadRange(Uri("range/obj"), (3 << 20) - 10, 100).value_or("?") ==
              data.substr((3 << 20) - 10));
  EXPECT_EQ(store->ReadRange(Uri("range/obj"), 3 << 20, 100).value_or("?"), "");
  EXPECT_EQ(store->ReadRange(Uri("range/empty"), 0, 100).value_or("?"), "");
  EXPECT_TRUE(absl::IsNotFound(store->ReadRange(Uri("range/none"), 0, 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store->ReadRange(Uri("range/obj"), -1, 1).status()));
}

TEST_F(S3ObjectStoreTest, ListingFollowsContinuationTokens) {
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(direct_->PutObject(kBucket, absl::StrCat("pages-k", i), "x").ok());
  }
  auto store = Store(true, [](S3Options& o) { o.list_page_size = 2; });
  auto listed = store->List(Uri("pages-"));
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->size(), 7u);
  EXPECT_EQ(listed->back().uri, Uri("pages-k6"));
  EXPECT_EQ(proxy_->requests(), 4);  // 2 + 2 + 2 + 1
}

TEST_F(S3ObjectStoreTest, ListFirstAsksForNoMoreKeysThanItNeeds) {
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(direct_->PutObject(kBucket, absl::StrCat("first-k", i), "x").ok());
  }
  auto store = Store(true, [](S3Options& o) { o.list_page_size = 2; });
  // One object: one request (max-keys 1), the first key.
  auto first = store->ListFirst(Uri("first-"), 1);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 1u);
  EXPECT_EQ(first->front().uri, Uri("first-k0"));
  EXPECT_EQ(proxy_->requests(), 1);
  // Three objects in pages of two: two requests, the second for one key.
  auto three = store->ListFirst(Uri("first-"), 3);
  ASSERT_TRUE(three.ok()) << three.status();
  ASSERT_EQ(three->size(), 3u);
  EXPECT_EQ(three->back().uri, Uri("first-k2"));
  EXPECT_EQ(proxy_->requests(), 3);
  // An object exists when it is the first under its own URI.
  EXPECT_EQ(store->ListFirst(Uri("first-k3"), 1).value().at(0).uri, Uri("first-k3"));
  EXPECT_TRUE(store->ListFirst(Uri("first-z"), 1).value().empty());
  EXPECT_TRUE(absl::IsInvalidArgument(store->ListFirst(Uri("first-"), 0).status()));
}

TEST_F(S3ObjectStoreTest, AnObjectDeletedMidListingIsMissedOrNotFoundNeverAnError) {
  // Keys at the top of a bucket of their own: a flat listing prefix (see
  // MotoServer::Reset).
  ASSERT_TRUE(direct_->CreateBucket("kiln-ckpt").ok());
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(direct_->PutObject("kiln-ckpt", absl::StrCat("k", i), "x").ok());
  }
  // When the second page is asked for, k1 (already listed) and k4 (not yet)
  // are deleted.
  bool deleted = false;
  proxy_->OnRequest([&](const std::string& head) {
    if (!deleted && absl::StrContains(head, "continuation-token=")) {
      deleted = true;
      ASSERT_TRUE(direct_->DeleteObject("kiln-ckpt", "k1").ok());
      ASSERT_TRUE(direct_->DeleteObject("kiln-ckpt", "k4").ok());
    }
  });
  auto store = Store(true, [](S3Options& o) { o.list_page_size = 2; });
  auto listed = store->List("s3://kiln-ckpt/");
  ASSERT_TRUE(listed.ok()) << listed.status();
  std::vector<std::string> uris;
  for (const auto& o : *listed) uris.push_back(o.uri);
  EXPECT_THAT(uris, ElementsAre("s3://kiln-ckpt/k0", "s3://kiln-ckpt/k1", "s3://kiln-ckpt/k2", "s3://kiln-ckpt/k3",
                                "s3://kiln-ckpt/k5"));
  absl::Status s = store->GetToFile("s3://kiln-ckpt/k1", tmp_.path() + "/k1");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("s3://kiln-ckpt/k1"));

  // A checkpoint restore skips what disappears between its listing and its copy.
  deleted = false;
  ASSERT_TRUE(direct_->PutObject("kiln-ckpt", "k1", "x").ok());
  ASSERT_TRUE(direct_->PutObject("kiln-ckpt", "k4", "x").ok());
  CheckpointSync sync(*store, "s3://kiln-ckpt/", tmp_.path() + "/restore");
  ASSERT_TRUE(sync.Restore().ok());
  EXPECT_THAT(testing::ListDir(tmp_.path() + "/restore"), ElementsAre("k0", "k2", "k3", "k5"));
}

TEST_F(S3ObjectStoreTest, ATamperedSignatureGets403) {
  ASSERT_TRUE(direct_->PutObject(kBucket, "secret", "x").ok());
  proxy_->TamperSignatures(true);
  auto store = Store(true);
  absl::StatusOr<std::string> got = store->Get(Uri("secret"));
  EXPECT_TRUE(absl::IsPermissionDenied(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr("SignatureDoesNotMatch"));
  EXPECT_THAT(got.status().message(), HasSubstr(Uri("secret")));
  EXPECT_EQ(proxy_->requests(), 1);  // not retried

  // The wrong secret, straight to moto: the same.
  AwsCredentials wrong = key_;
  wrong.secret_access_key[0] = wrong.secret_access_key[0] == 'A' ? 'B' : 'A';
  auto bad = NewS3ObjectStore(moto_.Options(wrong));
  ASSERT_TRUE(bad.ok());
  EXPECT_TRUE(absl::IsPermissionDenied((*bad)->List(Uri("")).status()));
}

TEST_F(S3ObjectStoreTest, A5xxBurstIsRetriedAndALongerOneFailsNamingTheObject) {
  ASSERT_TRUE(direct_->PutObject(kBucket, "burst", "payload").ok());
  auto store = Store(true);
  proxy_->FailNext(3, 503, "SlowDown");
  absl::StatusOr<std::string> got = store->Get(Uri("burst"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "payload");
  EXPECT_EQ(proxy_->requests(), 4);

  proxy_->FailNext(3, 500, "InternalError");
  EXPECT_TRUE(store->Put(Uri("burst2"), "again").ok());
  EXPECT_EQ(*store->Get(Uri("burst2")), "again");

  proxy_->FailNext(100, 500, "InternalError");
  absl::Status s = store->GetToFile(Uri("burst"), tmp_.path() + "/burst");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(Uri("burst")));
  EXPECT_THAT(s.message(), HasSubstr("after 5 attempts"));
  EXPECT_TRUE(testing::ListDir(tmp_.path()).empty());
}

TEST_F(S3ObjectStoreTest, ADownloadCutMidwayResumesWhereItStopped) {
  const std::string data = RandomBytes(12 << 20, 4);
  ASSERT_TRUE(direct_->PutObject(kBucket, "cut/obj", data).ok());
  auto store = Store(true);
  proxy_->CutNextResponse(1 << 20, /*then_down=*/false);
  ASSERT_TRUE(store->GetToFile(Uri("cut/obj"), tmp_.path() + "/obj").ok());
  EXPECT_EQ(ReadFile(tmp_.path() + "/obj"), data);
  // Read (Pipe mode's stream) resumes too, without repeating a byte.
  proxy_->CutNextResponse(3 << 20, false);
  std::string streamed;
  ASSERT_TRUE(store->Read(Uri("cut/obj"), [&](std::string_view c) {
    streamed.append(c);
    return absl::OkStatus();
  }).ok());
  EXPECT_EQ(streamed, data);
}

// The first exchange of a read is cut, and the object is replaced before the
// rest is asked for: the rest must come from the object the first bytes came
// from (pinned to its ETag) or not at all, never from the new one.
TEST_F(S3ObjectStoreTest, AReadCutOnItsFirstExchangeNeverSplicesTwoVersions) {
  const std::string data = RandomBytes(8 << 20, 6);
  ASSERT_TRUE(direct_->PutObject(kBucket, "pin/obj", data).ok());
  auto store = Store(true);
  proxy_->CutNextResponse(3 << 20, /*then_down=*/false);
  std::atomic<int> requests{0};
  proxy_->OnRequest([&](const std::string&) {
    if (++requests == 2) {  // the resumption: the object changes first
      EXPECT_TRUE(direct_->PutObject(kBucket, "pin/obj", RandomBytes(8 << 20, 7)).ok());
    }
  });
  std::string streamed;
  const absl::Status s = store->Read(Uri("pin/obj"), [&](std::string_view c) {
    streamed.append(c);
    return absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("changed while it was read"));
  EXPECT_EQ(streamed, data.substr(0, streamed.size()));  // the old object's bytes only
}

// "." and ".." are ordinary segments of an S3 key: the request goes to the
// key named (and signed), not to the path they would resolve to.
TEST_F(S3ObjectStoreTest, DotSegmentsAreKeptInKeys) {
  auto store = Store();
  const absl::Status put = store->Put(Uri("dots/a/../b"), "up and over");
  ASSERT_TRUE(put.ok()) << put;
  absl::StatusOr<std::string> got = store->Get(Uri("dots/a/../b"));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "up and over");
  EXPECT_TRUE(absl::IsNotFound(store->Get(Uri("dots/b")).status()));
}

TEST_F(S3ObjectStoreTest, EndpointDownMidDownloadFailsClearlyAfterRetries) {
  const std::string data = RandomBytes(12 << 20, 5);
  ASSERT_TRUE(direct_->PutObject(kBucket, "down/obj", data).ok());
  auto store = Store(true);
  proxy_->CutNextResponse(1 << 20, /*then_down=*/true);
  absl::Status s = store->GetToFile(Uri("down/obj"), tmp_.path() + "/d/obj");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("GET " + Uri("down/obj")));
  EXPECT_THAT(s.message(), HasSubstr("failed after 5 attempts"));
  // Nothing half-written is left behind.
  EXPECT_TRUE(testing::ListDir(tmp_.path() + "/d").empty());
}

TEST_F(S3ObjectStoreTest, AFailedMultipartUploadIsAbortedAndTheOldObjectStays) {
  ASSERT_TRUE(direct_->PutObject(kBucket, "atomic/model", "v1").ok());
  const std::string data = RandomBytes(16 << 20, 6);
  WriteFile(tmp_.path() + "/v2", data);
  auto store = Store(true);
  proxy_->FailMatching("partNumber=2&", 500, "InternalError");
  absl::Status s = store->PutFromFile(Uri("atomic/model"), tmp_.path() + "/v2");
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(Uri("atomic/model")));
  proxy_->FailMatching("", 0, "");
  EXPECT_EQ(*store->Get(Uri("atomic/model")), "v1");
  std::string uploads;
  ASSERT_EQ(moto_.Aws(key_, {"s3api", "list-multipart-uploads", "--bucket", kBucket, "--output",
                             "json"},
                      &uploads),
            0)
      << uploads;
  EXPECT_THAT(uploads, ::testing::Not(HasSubstr("UploadId"))) << uploads;
  // Then it goes through.
  ASSERT_TRUE(store->PutFromFile(Uri("atomic/model"), tmp_.path() + "/v2").ok());
  EXPECT_EQ(ReadWithCli("atomic/model"), data);
}

// S3's answer to CompleteMultipartUpload is lost after S3 completed the
// upload, and the retry finds the upload gone (NoSuchUpload). moto 5.2.1
// answers such a retry with its 200 again, so the proxy answers for it, as
// S3 does. The object is the one uploaded: the upload succeeded.
TEST_F(S3ObjectStoreTest, AnUploadCompletedWhoseAnswerWasLostSucceeds) {
  ASSERT_TRUE(direct_->PutObject(kBucket, "lost/model", "v1").ok());
  const std::string data = RandomBytes((12 << 20) + 7, 8);  // three parts
  auto store = Store(true);
  proxy_->CutMatching("POST", kComplete, 12);  // within the status line
  proxy_->AnswerMatching("POST", kComplete, 404, FaultProxy::S3Error("NoSuchUpload"));
  const absl::Status s = store->Put(Uri("lost/model"), data);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(CompleteRequests(), 2);
  EXPECT_EQ(proxy_->RequestsMatching("HEAD", "/lost/model"), 1);  // the check
  EXPECT_EQ(ReadWithCli("lost/model"), data);
}

// The same, but the object at the key when it is checked is another one (a
// writer replaced it): not the upload's success.
TEST_F(S3ObjectStoreTest, ALostCompleteAnswerWithAnotherObjectAtTheKeyFails) {
  const std::string data = RandomBytes((12 << 20) + 7, 9);
  auto store = Store(true);
  proxy_->CutMatching("POST", kComplete, 12);
  proxy_->AnswerMatching("POST", kComplete, 404, FaultProxy::S3Error("NoSuchUpload"));
  proxy_->OnRequest([&](const std::string& head) {
    if (absl::StartsWith(head, "HEAD ")) {
      EXPECT_TRUE(direct_->PutObject(kBucket, "lost/other", "someone else's").ok());
    }
  });
  const absl::Status s = store->Put(Uri("lost/other"), data);
  EXPECT_TRUE(absl::IsAborted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("CompleteMultipartUpload " + Uri("lost/other")));
  EXPECT_THAT(s.message(), HasSubstr("is not the one uploaded"));
  EXPECT_EQ(CompleteRequests(), 2);
  proxy_->OnRequest(nullptr);
  EXPECT_TRUE(store->Get(Uri("lost/other")).value_or("?") == "someone else's");
  EXPECT_THAT(MultipartUploads(), ::testing::Not(HasSubstr("UploadId")));
}

// With part ETags that are not MD5s (SSE-KMS), the object cannot be checked:
// a lost answer leaves the outcome unknown, and the error says so.
TEST_F(S3ObjectStoreTest, ALostCompleteAnswerWithoutMd5PartEtagsIsAnUnknownOutcome) {
  internal::S3ClientOptions c;
  c.endpoint = proxy_->endpoint();
  c.credentials = {key_.access_key_id, key_.secret_access_key, ""};
  c.retry_base_delay = absl::Milliseconds(5);
  c.retry_max_delay = absl::Milliseconds(50);
  internal::S3Client client(c);
  absl::StatusOr<std::string> id = client.CreateMultipartUpload(kBucket, "kms/obj");
  ASSERT_TRUE(id.ok()) << id.status();
  ASSERT_TRUE(client.UploadPart(kBucket, "kms/obj", *id, 1, "part").ok());
  proxy_->CutMatching("POST", kComplete, 12);
  proxy_->AnswerMatching("POST", kComplete, 404, FaultProxy::S3Error("NoSuchUpload"));
  const absl::Status s =
      client.CompleteMultipartUpload(kBucket, "kms/obj", *id, {"\"kms-0123456789abcdef\""});
  EXPECT_TRUE(absl::IsUnknown(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("CompleteMultipartUpload " + Uri("kms/obj")));
  EXPECT_THAT(s.message(), HasSubstr("the outcome is unknown"));
  EXPECT_EQ(CompleteRequests(), 2);
}

// Every answer to CompleteMultipartUpload is lost, though the first attempt
// completed the upload (moto answers the retries with 200 again, and the
// proxy cuts every answer). When the attempts run out, the object at the key
// is the one uploaded: the Put succeeded.
TEST_F(S3ObjectStoreTest, AnUploadCompletedWhoseEveryAnswerWasLostSucceeds) {
  ASSERT_TRUE(direct_->PutObject(kBucket, "all-lost/model", "v1").ok());
  const std::string data = RandomBytes((5 << 20) + 7, 13);
  auto store = Store(true, FastRetries);
  proxy_->CutMatching("POST", kComplete, 12, /*times=*/-1);
  const absl::Status s = store->Put(Uri("all-lost/model"), data);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(CompleteRequests(), 5);
  EXPECT_EQ(proxy_->RequestsMatching("HEAD", "/all-lost/model"), 1);  // the check
  EXPECT_EQ(ReadWithCli("all-lost/model"), data);
}

// Every attempt of CompleteMultipartUpload is dropped before it reaches S3:
// the upload never completed, the old object stays, and the Put fails with
// Unavailable, the upload aborted. So does one that completed but whose
// object another writer replaced before the check: only the exact ETag counts.
TEST_F(S3ObjectStoreTest, AnUploadNeverCompletedWhoseEveryAttemptWasLostIsUnavailable) {
  ASSERT_TRUE(direct_->PutObject(kBucket, "all-lost/kept", "v1").ok());
  const std::string data = RandomBytes((5 << 20) + 7, 14);
  auto store = Store(true, FastRetries);
  proxy_->DropMatching("POST", kComplete, /*times=*/-1);
  absl::Status s = store->Put(Uri("all-lost/kept"), data);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("CompleteMultipartUpload " + Uri("all-lost/kept")));
  EXPECT_THAT(s.message(), HasSubstr("failed after 5 attempts"));
  EXPECT_THAT(s.message(), HasSubstr("is not the one uploaded"));
  EXPECT_EQ(CompleteRequests(), 5);
  EXPECT_EQ(proxy_->RequestsMatching("HEAD", "/all-lost/kept"), 1);
  proxy_->ClearRules();
  EXPECT_TRUE(store->Get(Uri("all-lost/kept")).value_or("?") == "v1");
  EXPECT_THAT(MultipartUploads(), ::testing::Not(HasSubstr("UploadId")));

  proxy_->CutMatching("POST", kComplete, 12, /*times=*/-1);
  proxy_->OnRequest([&](const std::string& head) {
    if (absl::StartsWith(head, "HEAD ")) {
      EXPECT_TRUE(direct_->PutObject(kBucket, "all-lost/kept", "someone else's").ok());
    }
  });
  s = store->Put(Uri("all-lost/kept"), data);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("is not the one uploaded"));
  EXPECT_EQ(proxy_->RequestsMatching("HEAD", "/all-lost/kept"), 2);
  proxy_->OnRequest(nullptr);
  EXPECT_TRUE(store->Get(Uri("all-lost/kept")).value_or("?") == "someone else's");
}

// The key already holds these very bytes, uploaded in the same parts, and no
// Complete gets through: the check finds the right object, so the Put is OK,
// and the upload that never completed is aborted rather than left with its
// parts stored (and billed).
TEST_F(S3ObjectStoreTest, AnIdenticalObjectFoundByTheCheckLeavesNoUploadBehind) {
  const std::string data = RandomBytes((5 << 20) + 7, 15);
  auto store = Store(true, FastRetries);
  ASSERT_TRUE(store->Put(Uri("same/model"), data).ok());
  proxy_->DropMatching("POST", kComplete, /*times=*/-1);
  const absl::Status s = store->Put(Uri("same/model"), data);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(proxy_->RequestsMatching("HEAD", "/same/model"), 1);
  proxy_->ClearRules();
  EXPECT_THAT(MultipartUploads(), ::testing::Not(HasSubstr("UploadId")));
  EXPECT_EQ(ReadWithCli("same/model"), data);
}

TEST(MultipartEtagTest, IsTheMd5OfThePartMd5sAndTheirCount) {
  // hashlib: md5(md5(b"a").digest() + md5(b"b").digest()).hexdigest() + "-2"
  EXPECT_EQ(internal::MultipartEtag({"\"0cc175b9c0f1b6a831c399e269772661\"",
                                     "92EB5FFEE6AE2FEC3AD71C777531578F"}),
            "96e024ba2074fe77e8e965ba43a704be-2");
  EXPECT_EQ(internal::MultipartEtag({}), "");
  EXPECT_EQ(internal::MultipartEtag({"\"0cc175b9c0f1b6a831c399e26977266\""}), "");  // 31
  EXPECT_EQ(internal::MultipartEtag({"\"0cc175b9c0f1b6a831c399e26977266x\""}), "");
}

// S3 may answer CompleteMultipartUpload with 200 and an <Error> body: a
// retryable one (InternalError) is retried like a 5xx.
TEST_F(S3ObjectStoreTest, AnErrorInTheBodyOfA200CompleteIsRetried) {
  const std::string data = RandomBytes((12 << 20) + 7, 10);
  auto store = Store(true);
  proxy_->AnswerMatching("POST", kComplete, 200, FaultProxy::S3Error("InternalError"));
  const absl::Status s = store->Put(Uri("body-error/model"), data);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(CompleteRequests(), 2);
  EXPECT_EQ(ReadWithCli("body-error/model"), data);
}

// A non-retryable error in a 200's body fails at once; retryable ones fail
// once the attempts are spent. Both name the call; the old object stays.
TEST_F(S3ObjectStoreTest, ANonRetryableOrLastingErrorInA200CompleteFailsNamingTheCall) {
  ASSERT_TRUE(direct_->PutObject(kBucket, "body-error/kept", "v1").ok());
  const std::string data = RandomBytes((12 << 20) + 7, 11);
  auto store = Store(true);
  proxy_->AnswerMatching("POST", kComplete, 200, FaultProxy::S3Error("InvalidPart"));
  absl::Status s = store->Put(Uri("body-error/kept"), data);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("CompleteMultipartUpload " + Uri("body-error/kept")));
  EXPECT_THAT(s.message(), HasSubstr("InvalidPart"));
  EXPECT_EQ(CompleteRequests(), 1);

  proxy_->AnswerMatching("POST", kComplete, 200, FaultProxy::S3Error("InternalError"), -1);
  s = store->Put(Uri("body-error/kept"), data);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("CompleteMultipartUpload " + Uri("body-error/kept")));
  EXPECT_THAT(s.message(), HasSubstr("failed after 5 attempts"));
  EXPECT_THAT(s.message(), HasSubstr("InternalError"));
  EXPECT_EQ(CompleteRequests(), 1 + 5);
  proxy_->ClearRules();
  EXPECT_EQ(*store->Get(Uri("body-error/kept")), "v1");
  EXPECT_THAT(MultipartUploads(), ::testing::Not(HasSubstr("UploadId")));
}

// A non-retryable error in a 200's body fails as the same error does in an
// answer with its own status: AccessDenied is PermissionDenied, not retried,
// and the upload is aborted.
TEST_F(S3ObjectStoreTest, AnAccessDeniedInA200CompleteIsPermissionDenied) {
  ASSERT_TRUE(direct_->PutObject(kBucket, "body-error/denied", "v1").ok());
  const std::string data = RandomBytes((5 << 20) + 7, 15);
  auto store = Store(true);
  proxy_->AnswerMatching("POST", kComplete, 200, FaultProxy::S3Error("AccessDenied"));
  const absl::Status s = store->Put(Uri("body-error/denied"), data);
  EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("CompleteMultipartUpload " + Uri("body-error/denied")));
  EXPECT_THAT(s.message(), HasSubstr("AccessDenied"));
  EXPECT_EQ(CompleteRequests(), 1);
  EXPECT_TRUE(store->Get(Uri("body-error/denied")).value_or("?") == "v1");
  EXPECT_THAT(MultipartUploads(), ::testing::Not(HasSubstr("UploadId")));
}

// Each error code means the same in a 200's body as with the status S3 sends
// it with. The proxy answers every CompleteMultipartUpload: none reaches moto.
TEST_F(S3ObjectStoreTest, AnErrorInA200BodyMapsAsWithItsOwnStatus) {
  internal::S3ClientOptions options;
  options.endpoint = proxy_->endpoint();
  options.credentials = {key_.access_key_id, key_.secret_access_key, ""};
  options.retry_base_delay = absl::Milliseconds(1);
  options.retry_max_delay = absl::Milliseconds(5);
  internal::S3Client client(options);
  const std::vector<std::string> parts = {"\"0cc175b9c0f1b6a831c399e269772661\""};
  const struct {
    const char* code;
    int status;
  } kCases[] = {
      {"AccessDenied", 403},   {"SignatureDoesNotMatch", 403}, {"InvalidAccessKeyId", 403},
      {"NoSuchBucket", 404},   {"NoSuchUpload", 404},          {"PreconditionFailed", 412},
      {"InvalidPart", 400},    {"MalformedXML", 400},          {"NotImplemented", 501},
      {"SlowDown", 503},       {"SomeFutureCode", 400},
  };
  for (const auto& c : kCases) {
    proxy_->ClearRules();
    proxy_->AnswerMatching("POST", kComplete, c.status, FaultProxy::S3Error(c.code), -1);
    const absl::Status with_status =
        client.CompleteMultipartUpload(kBucket, "map/obj", "id", parts);
    proxy_->ClearRules();
    proxy_->AnswerMatching("POST", kComplete, 200, FaultProxy::S3Error(c.code), -1);
    const absl::Status in_body = client.CompleteMultipartUpload(kBucket, "map/obj", "id", parts);
    EXPECT_FALSE(in_body.ok()) << c.code;
    EXPECT_EQ(in_body.code(), with_status.code())
        << c.code << ": " << in_body << " vs " << with_status;
    EXPECT_THAT(in_body.message(), HasSubstr(c.code));
    // Complete carries no condition: a 412 there is no read that saw the
    // object change (only a GET pinned with If-Match says so).
    EXPECT_THAT(with_status.message(), ::testing::Not(HasSubstr("changed while it was read")))
        << c.code;
  }
}

// NoSuchUpload that follows no lost answer is a failure, even when the object
// at the key is the very one the upload would make (the same bytes in the
// same parts, put there before).
TEST_F(S3ObjectStoreTest, NoSuchUploadWithoutALostAnswerIsAnError) {
  const std::string data = RandomBytes((12 << 20) + 7, 12);
  auto store = Store(true);
  ASSERT_TRUE(store->Put(Uri("nsu/model"), data).ok());
  // On the first attempt.
  proxy_->AnswerMatching("POST", kComplete, 404, FaultProxy::S3Error("NoSuchUpload"));
  absl::Status s = store->Put(Uri("nsu/model"), data);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("CompleteMultipartUpload " + Uri("nsu/model")));
  EXPECT_THAT(s.message(), HasSubstr("NoSuchUpload"));
  EXPECT_EQ(CompleteRequests(), 1 + 1);
  // After an attempt that was answered (503 SlowDown).
  proxy_->AnswerMatching("POST", kComplete, 503, FaultProxy::S3Error("SlowDown"));
  proxy_->AnswerMatching("POST", kComplete, 404, FaultProxy::S3Error("NoSuchUpload"));
  s = store->Put(Uri("nsu/model"), data);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("NoSuchUpload"));
  EXPECT_EQ(CompleteRequests(), 2 + 2);
  EXPECT_EQ(proxy_->RequestsMatching("HEAD", "/nsu/model"), 0);
  EXPECT_THAT(MultipartUploads(), ::testing::Not(HasSubstr("UploadId")));
}

// A missing key is no error for Delete (S3 answers 204; a server answering
// NoSuchKey means the same), but the error code decides, not the message:
// a missing bucket, or a 404 without an S3 error code (not S3 answering),
// is NotFound, even for a key whose name holds "NoSuchKey".
TEST_F(S3ObjectStoreTest, DeleteTellsAMissingObjectFromAMissingBucketByTheErrorCode) {
  auto store = Store(true);
  ASSERT_TRUE(store->Put(Uri("del/NoSuchKey"), "x").ok());
  proxy_->AnswerMatching("DELETE", "/del/", 404, FaultProxy::S3Error("NoSuchKey"));
  EXPECT_TRUE(store->Delete(Uri("del/NoSuchKey")).ok());
  proxy_->AnswerMatching("DELETE", "/del/", 404, FaultProxy::S3Error("NoSuchBucket"));
  absl::Status s = store->Delete(Uri("del/NoSuchKey"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("NoSuchBucket"));
  proxy_->AnswerMatching("DELETE", "/del/", 404, "<html>Not Found</html>");
  s = store->Delete(Uri("del/NoSuchKey"));
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("HTTP 404"));
  // The object was never deleted by the answers above; the real delete is.
  EXPECT_EQ(*store->Get(Uri("del/NoSuchKey")), "x");
  ASSERT_TRUE(store->Delete(Uri("del/NoSuchKey")).ok());
  EXPECT_TRUE(absl::IsNotFound(store->Get(Uri("del/NoSuchKey")).status()));
  // A bucket that does not exist, as moto itself answers it.
  s = store->Delete("s3://kiln-no-such-bucket/k");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("NoSuchBucket"));
}

// Keys are input: an error that names an object shows its URI escaped and
// cut, and the server's own text (an error's message) escaped, so that
// neither can break the message's line or make it long.
TEST_F(S3ObjectStoreTest, KeysAndServerTextInErrorsAreShownEscapedAndCut) {
  auto one_line = [](absl::string_view message) {
    return message.find_first_of("\n\x1b\xff") == absl::string_view::npos;
  };
  auto store = Store(/*through_proxy=*/true);
  proxy_->AnswerMatching("GET", "/odd/", 404,
                         "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code>"
                         "<Message>gone\n\x1b[2Jforged \xff</Message></Error>");
  absl::StatusOr<std::string> got = store->Get(Uri("odd/a\nb'c\"d\xff" "e"));
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_TRUE(one_line(got.status().message())) << got.status();
  EXPECT_THAT(got.status().message(),
              HasSubstr(absl::StrCat("GET ", Uri(R"(odd/a\nb'c"d\xFFe)"),
                                     R"(: HTTP 404 NoSuchKey: gone\n\u001b[2Jforged \xFF)")));

  // A key of 3000 bytes: the message keeps the first 1024 of the URI.
  const std::string long_key = "long/" + std::string(3000, 'k');
  proxy_->AnswerMatching("GET", "/long/", 404, FaultProxy::S3Error("NoSuchKey"));
  got = store->Get(Uri(long_key));
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_THAT(got.status().message(),
              HasSubstr(absl::StrCat("GET ", Uri(long_key).substr(0, 1024), "...: HTTP 404")));
  EXPECT_LT(got.status().message().size(), 1024u + 100u) << got.status();

  got = store->Get("gs://bucket/a\nb");
  EXPECT_TRUE(absl::IsInvalidArgument(got.status())) << got.status();
  EXPECT_THAT(got.status().message(), HasSubstr(R"('gs://bucket/a\nb' is not an s3:// URI)"));
}

TEST_F(S3ObjectStoreTest, UrisThatNameNoObjectAreInvalid) {
  auto store = Store();
  EXPECT_TRUE(absl::IsInvalidArgument(store->Get("file:///x").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Get("s3://").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(store->Put(Uri("dir/"), "x")));
  EXPECT_TRUE(absl::IsNotFound(store->PutFromFile(Uri("x"), tmp_.path() + "/nope")));
}

}  // namespace
}  // namespace kiln::aws

// The ObjectStore conformance suite on S3 (moto). It skips, saying why, only when moto cannot
// start here; the tests above fail then.
namespace kiln::store_testing {
namespace {

constexpr char kConformanceBucket[] = "kiln-conformance";

struct S3StoreKind {
  static absl::Status Available() { return aws::SharedMoto().start_status; }
  static std::unique_ptr<ObjectStore> New(const TempDir&) {
    if (!Available().ok()) return nullptr;
    aws::testing::MotoServer& moto = aws::SharedMoto().server;
    // Signature checking off: the suite lists nested prefixes (see MotoServer::Reset).
    absl::StatusOr<aws::AwsCredentials> key = moto.Reset(/*check_signatures=*/false);
    EXPECT_TRUE(key.ok()) << key.status();
    if (!key.ok()) return nullptr;
    aws::internal::S3ClientOptions c;
    c.endpoint = moto.endpoint();
    c.credentials = {key->access_key_id, key->secret_access_key, ""};
    absl::Status bucket = aws::internal::S3Client(c).CreateBucket(kConformanceBucket);
    EXPECT_TRUE(bucket.ok()) << bucket;
    absl::StatusOr<std::unique_ptr<ObjectStore>> store = aws::NewS3ObjectStore(moto.Options(*key));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }
  static std::string Root(const TempDir&) {
    return absl::StrCat("s3://", kConformanceBucket, "/store/");
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(S3, ObjectStoreConformanceTest, S3StoreKind);

}  // namespace
}  // namespace kiln::store_testing
