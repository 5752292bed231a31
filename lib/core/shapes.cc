#include "core/internal/shapes.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <algorithm>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace kiln::internal {
namespace {

[[noreturn]] void ModelDefect(const std::string& what) {
  std::fprintf(stderr, "kiln: embedded service model is broken: %s\n", what.c_str());
  std::abort();
}

Shape::Type ParseType(const std::string& type, const std::string& shape) {
  using T = Shape::Type;
  if (type == "string") return T::kString;
  if (type == "integer") return T::kInteger;
  if (type == "long") return T::kLong;
  if (type == "boolean") return T::kBoolean;
  if (type == "float") return T::kFloat;
  if (type == "double") return T::kDouble;
  if (type == "timestamp") return T::kTimestamp;
  if (type == "structure") return T::kStructure;
  if (type == "list") return T::kList;
  if (type == "map") return T::kMap;
  ModelDefect("shape " + shape + " has unknown type " + type);
}

const google::protobuf::Value* Field(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? nullptr : &it->second;
}

}  // namespace

const ShapeModel& ShapeModel::Get() {
  static const ShapeModel* model = [] {
    google::protobuf::Struct root;
    std::string_view text = TrainingShapesJson();
    auto status = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(text.data(), text.size()), &root);
    if (!status.ok()) ModelDefect(status.ToString());
    const google::protobuf::Value* shapes_value = Field(root, "shapes");
    if (shapes_value == nullptr) ModelDefect("no 'shapes'");
    const auto& shapes = shapes_value->struct_value().fields();

    auto* m = new ShapeModel();
    // First pass: create every shape so members can point at each other.
    for (const auto& [name, unused] : shapes) {
      auto shape = std::make_unique<Shape>();
      shape->name = name;
      m->shapes_[name] = std::move(shape);
    }
    auto resolve = [&](const google::protobuf::Value& ref, const std::string& owner) {
      const google::protobuf::Value* target = Field(ref.struct_value(), "shape");
      if (target == nullptr) ModelDefect(owner + ": reference without 'shape'");
      const Shape* s = m->Find(target->string_value());
      if (s == nullptr) ModelDefect(owner + ": unknown shape " + target->string_value());
      return s;
    };
    for (const auto& [name, value] : shapes) {
      Shape& shape = *m->shapes_[name];
      const auto& def = value.struct_value();
      const google::protobuf::Value* type = Field(def, "type");
      if (type == nullptr) ModelDefect(name + ": no type");
      shape.type = ParseType(type->string_value(), name);
      if (const auto* v = Field(def, "min")) shape.min = static_cast<int64_t>(v->number_value());
      if (const auto* v = Field(def, "max")) shape.max = static_cast<int64_t>(v->number_value());
      if (const auto* v = Field(def, "pattern")) {
        std::string error;
        shape.pattern = Regex::Compile(v->string_value(), Regex::Mode::kFullMatch, &error);
        if (shape.pattern == nullptr) ModelDefect(name + ": pattern: " + error);
      }
      if (const auto* v = Field(def, "enum")) {
        for (const auto& e : v->list_value().values()) {
          shape.enum_values.push_back(e.string_value());
          shape.enum_set.insert(e.string_value());
        }
      }
      if (const auto* v = Field(def, "member")) shape.element = resolve(*v, name);
      if (const auto* v = Field(def, "key")) shape.key = resolve(*v, name);
      if (const auto* v = Field(def, "value")) shape.value = resolve(*v, name);
      if (const auto* v = Field(def, "members")) {
        absl::flat_hash_set<std::string> required;
        if (const auto* r = Field(def, "required")) {
          for (const auto& e : r->list_value().values()) required.insert(e.string_value());
        }
        // The JSON object's member order is lost in a Struct (a map); the
        // model's member order is kept by the generated proto, which is what
        // the validator walks. Here members are sorted by name for stability.
        for (const auto& [member_name, ref] : v->struct_value().fields()) {
          shape.members.push_back(
              Member{member_name, resolve(ref, name + "." + member_name),
                     required.contains(member_name)});
        }
        std::sort(shape.members.begin(), shape.members.end(),
                  [](const Member& a, const Member& b) { return a.name < b.name; });
      }
    }
    return m;
  }();
  return *model;
}

const Shape* ShapeModel::Find(std::string_view name) const {
  auto it = shapes_.find(std::string(name));
  return it == shapes_.end() ? nullptr : it->second.get();
}

}  // namespace kiln::internal
