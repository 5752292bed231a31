// The SageMaker service model's shapes, as compiled into the library from
// lib/core/schema/training_shapes.json, with their patterns compiled.
// Immutable after first use; thread-safe.
#ifndef KILN_LIB_CORE_INTERNAL_SHAPES_H_
#define KILN_LIB_CORE_INTERNAL_SHAPES_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/internal/regex.h"

namespace kiln::internal {

// The embedded model text (generated at configure time).
std::string_view TrainingShapesJson();

struct Shape;

struct Member {
  std::string name;  // PascalCase, as on the wire
  const Shape* shape = nullptr;
  bool required = false;
};

struct Shape {
  enum class Type { kString, kInteger, kLong, kBoolean, kFloat, kDouble, kTimestamp,
                    kStructure, kList, kMap };
  std::string name;
  Type type = Type::kString;
  std::optional<int64_t> min;  // length (string, list, map) or value (numbers)
  std::optional<int64_t> max;
  std::unique_ptr<Regex> pattern;  // kFullMatch
  std::vector<std::string> enum_values;  // model order
  absl::flat_hash_set<std::string> enum_set;
  std::vector<Member> members;           // structure, model order
  const Shape* element = nullptr;        // list member
  const Shape* key = nullptr;            // map
  const Shape* value = nullptr;          // map
};

class ShapeModel {
 public:
  // The model compiled into the library. Never fails: the embedded model is
  // checked by the tests; a defect there aborts with a message.
  static const ShapeModel& Get();

  // The shape of the given name, or nullptr.
  const Shape* Find(std::string_view name) const;

 private:
  ShapeModel() = default;
  absl::flat_hash_map<std::string, std::unique_ptr<Shape>> shapes_;
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_SHAPES_H_
