// The ObjectStore conformance suite (object_store_conformance.h) for the stores of kiln::core:
// the file store, unconfined and confined to the suite's folder, the in-memory store, and a
// store that keeps ObjectStore's default Read/GetToFile/PutFromFile. S3 joins in
// tests/aws/s3_object_store_test.cc, on moto.
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "conformance/object_store_conformance.h"
#include "gtest/gtest.h"
#include "kiln/object_store.h"

namespace kiln::store_testing {
namespace {

// Stores of this process need nothing outside it.
struct AlwaysAvailable {
  static absl::Status Available() { return absl::OkStatus(); }
};

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

struct FileStoreKind : AlwaysAvailable {
  static std::unique_ptr<ObjectStore> New(const TempDir&) { return NewFileObjectStore(); }
  static std::string Root(const TempDir& dir) {
    return absl::StrCat("file://", dir.path(), "/store/");
  }
};
// A file store confined to the suite's folder: inside it, it behaves as the
// unconfined one.
struct ConfinedFileStoreKind : AlwaysAvailable {
  static std::unique_ptr<ObjectStore> New(const TempDir& dir) {
    const std::string root = absl::StrCat(dir.path(), "/store");
    std::filesystem::create_directories(root);
    absl::StatusOr<std::unique_ptr<ObjectStore>> store =
        NewFileObjectStore(FileObjectStoreOptions{{root}});
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : NewFileObjectStore();
  }
  static std::string Root(const TempDir& dir) { return FileStoreKind::Root(dir); }
};
struct InMemoryStoreKind : AlwaysAvailable {
  static std::unique_ptr<ObjectStore> New(const TempDir&) { return NewInMemoryObjectStore(); }
  static std::string Root(const TempDir&) { return "mem://bucket/store/"; }
};
struct DefaultMethodsStoreKind : AlwaysAvailable {
  static std::unique_ptr<ObjectStore> New(const TempDir&) {
    return std::make_unique<DefaultMethodsStore>();
  }
  static std::string Root(const TempDir&) { return "s3://bucket/store/"; }
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

INSTANTIATE_TYPED_TEST_SUITE_P(Core, ObjectStoreConformanceTest, StoreKinds, StoreKindNames);

}  // namespace
}  // namespace kiln::store_testing
