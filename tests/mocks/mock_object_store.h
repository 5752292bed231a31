// A gmock double of ObjectStore (kiln/object_store.h). The store is synchronous: actions
// return the results directly.
#ifndef KILN_TESTS_MOCKS_MOCK_OBJECT_STORE_H_
#define KILN_TESTS_MOCKS_MOCK_OBJECT_STORE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "kiln/object_store.h"

namespace kiln::mocks {

class MockObjectStore : public ObjectStore {
 public:
  using Sink = absl::FunctionRef<absl::Status(std::string_view chunk)>;

  MOCK_METHOD(absl::StatusOr<std::vector<ObjectInfo>>, List, (std::string_view prefix),
              (override));
  MOCK_METHOD(absl::StatusOr<std::vector<ObjectInfo>>, ListFirst,
              (std::string_view prefix, int64_t max_objects), (override));
  MOCK_METHOD(absl::StatusOr<std::string>, Get, (std::string_view uri), (override));
  MOCK_METHOD(absl::Status, Put, (std::string_view uri, std::string_view data), (override));
  MOCK_METHOD(absl::Status, Delete, (std::string_view uri), (override));
  MOCK_METHOD(absl::Status, Read, (std::string_view uri, Sink sink), (override));
  MOCK_METHOD(absl::StatusOr<std::string>, ReadRange,
              (std::string_view uri, int64_t offset, int64_t length), (override));
  MOCK_METHOD(absl::Status, GetToFile, (std::string_view uri, const std::string& path),
              (override));
  MOCK_METHOD(absl::Status, PutFromFile, (std::string_view uri, const std::string& path),
              (override));
  MOCK_METHOD(absl::StatusOr<std::string>, LocalPath, (std::string_view uri), (override));
};

}  // namespace kiln::mocks

#endif  // KILN_TESTS_MOCKS_MOCK_OBJECT_STORE_H_
