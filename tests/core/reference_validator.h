// ReferenceValidator: the model walk Kiln's validator used before its checks
// were generated, kept for tests only as an oracle. It reads the service model
// as data (lib/core/schema/training_shapes.json), binds each kiln.v1 message
// to its shape by name and each field to its member by json_name, and walks
// any message by protobuf reflection, producing the same ValidationErrors as
// kiln::CheckShapeConstraints must (same paths, messages and order). It is
// slow and simple on purpose. Immutable after construction; thread-compatible.
#ifndef KILN_TESTS_CORE_REFERENCE_VALIDATOR_H_
#define KILN_TESTS_CORE_REFERENCE_VALIDATOR_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/internal/regex.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "kiln/v1/sagemaker.pb.h"
#include "kiln/validation.h"

namespace kiln::test {

// A Java pattern of the model as PCRE2 must read it to give Java's answers:
// Java's `.` excludes every line terminator (\n, \r, U+0085, U+2028,
// U+2029), PCRE2's only \n, so each `.` outside a class becomes a class of
// everything else. (The model's patterns have no nested classes or \Q...\E.)
inline std::string JavaToPcre2Dots(const std::string& java) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < java.size(); ++i) {
    if (java[i] == '\\' && i + 1 < java.size()) {
      out += java.substr(i, 2);
      ++i;
    } else if (java[i] == '.' && !in_class) {
      out += "[^\\x{2029}\\x{2028}\\x{85}\\r\\n]";
    } else {
      if (java[i] == '[') in_class = true;
      if (java[i] == ']') in_class = false;
      out += java[i];
    }
  }
  return out;
}

// One shape of the model, as the JSON writes it.
struct RefShape;

struct RefMember {
  std::string name;  // PascalCase, as on the wire
  const RefShape* shape = nullptr;
  bool required = false;
};

struct RefShape {
  std::string name;
  std::string type;  // "string", "integer", "long", "structure", "list", "map", ...
  std::optional<int64_t> min;
  std::optional<int64_t> max;
  std::optional<std::string> pattern_text;
  std::unique_ptr<internal::Regex> pattern;  // kFullMatch, always through PCRE2
  std::vector<std::string> enum_values;      // model order
  std::set<std::string> enum_set;
  std::vector<RefMember> members;  // sorted by name
  const RefShape* element = nullptr;
  const RefShape* key = nullptr;
  const RefShape* value = nullptr;
};

class ReferenceModel {
 public:
  // Parses the model's JSON text. On a defect sets `*error` and leaves the
  // model empty.
  ReferenceModel(const std::string& json, std::string* error) {
    google::protobuf::Struct root;
    auto status = google::protobuf::util::JsonStringToMessage(json, &root);
    if (!status.ok()) {
      *error = status.ToString();
      return;
    }
    const auto& shapes = root.fields().at("shapes").struct_value().fields();
    for (const auto& [name, unused] : shapes) {
      auto shape = std::make_unique<RefShape>();
      shape->name = name;
      shapes_[name] = std::move(shape);
    }
    auto field = [](const google::protobuf::Struct& s, const std::string& k)
        -> const google::protobuf::Value* {
      auto it = s.fields().find(k);
      return it == s.fields().end() ? nullptr : &it->second;
    };
    auto resolve = [&](const google::protobuf::Value& ref) {
      return Find(ref.struct_value().fields().at("shape").string_value());
    };
    for (const auto& [name, value] : shapes) {
      RefShape& shape = *shapes_[name];
      const auto& def = value.struct_value();
      shape.type = field(def, "type")->string_value();
      if (const auto* v = field(def, "min")) shape.min = static_cast<int64_t>(v->number_value());
      if (const auto* v = field(def, "max")) shape.max = static_cast<int64_t>(v->number_value());
      if (const auto* v = field(def, "pattern")) {
        shape.pattern_text = v->string_value();
        shape.pattern = internal::Regex::Compile(JavaToPcre2Dots(v->string_value()),
                                                 internal::Regex::Mode::kFullMatch, error);
        if (shape.pattern == nullptr) return;
      }
      if (const auto* v = field(def, "enum")) {
        for (const auto& e : v->list_value().values()) {
          shape.enum_values.push_back(e.string_value());
          shape.enum_set.insert(e.string_value());
        }
      }
      if (const auto* v = field(def, "member")) shape.element = resolve(*v);
      if (const auto* v = field(def, "key")) shape.key = resolve(*v);
      if (const auto* v = field(def, "value")) shape.value = resolve(*v);
      if (const auto* v = field(def, "members")) {
        std::set<std::string> required;
        if (const auto* r = field(def, "required")) {
          for (const auto& e : r->list_value().values()) required.insert(e.string_value());
        }
        for (const auto& [member_name, ref] : v->struct_value().fields()) {
          shape.members.push_back(
              RefMember{member_name, resolve(ref), required.count(member_name) > 0});
        }
        std::sort(shape.members.begin(), shape.members.end(),
                  [](const RefMember& a, const RefMember& b) { return a.name < b.name; });
      }
    }
    local_uri_ = internal::Regex::Compile(JavaToPcre2Dots("file://.+"),
                                          internal::Regex::Mode::kFullMatch, error);
  }

  const RefShape* Find(const std::string& name) const {
    auto it = shapes_.find(name);
    return it == shapes_.end() ? nullptr : it->second.get();
  }
  const std::map<std::string, std::unique_ptr<RefShape>>& shapes() const { return shapes_; }
  const internal::Regex& local_uri() const { return *local_uri_; }

  // The member a field stands for (matched by json_name), or nullptr.
  const RefMember* MemberOf(const RefShape& shape, const google::protobuf::FieldDescriptor* f) const {
    for (const RefMember& m : shape.members) {
      if (m.name == f->json_name()) return &m;
    }
    return nullptr;
  }

 private:
  std::map<std::string, std::unique_ptr<RefShape>> shapes_;
  std::unique_ptr<internal::Regex> local_uri_;
};

// The reflection walk: members in proto field order, depth first.
class ReferenceValidator {
 public:
  explicit ReferenceValidator(const ReferenceModel& model) : model_(model) {}

  std::vector<ValidationError> Check(const google::protobuf::Message& message,
                                     const ValidationOptions& options) {
    options_ = options;
    errors_.clear();
    CheckMessage(message, "");
    return std::move(errors_);
  }

 private:
  using FieldDescriptor = google::protobuf::FieldDescriptor;
  using Message = google::protobuf::Message;

  static std::string Join(const std::string& path, const std::string& part) {
    return path.empty() ? part : absl::StrCat(path, ".", part);
  }
  static std::string CamelCase(const std::string& member) {
    std::string out = member;
    out[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(out[0])));
    return out;
  }
  static int64_t Utf16Length(const std::string& s) {
    int64_t n = 0;
    for (size_t i = 0; i < s.size();) {
      unsigned char c = static_cast<unsigned char>(s[i]);
      size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
      n += len == 4 ? 2 : 1;
      i += len;
    }
    return n;
  }
  // Well-formed UTF-8: each sequence decodes to a scalar value (no surrogate,
  // nothing above U+10FFFF) in its shortest form.
  static bool IsUtf8(const std::string& s) {
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      const size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
      if (len == 0 || c > 0xF7 || i + len > s.size()) return false;
      uint32_t cp = len == 1 ? c : c & (0x7F >> len);
      for (size_t k = 1; k < len; ++k) {
        const unsigned char b = static_cast<unsigned char>(s[i + k]);
        if ((b & 0xC0) != 0x80) return false;
        cp = (cp << 6) | (b & 0x3F);
      }
      const uint32_t shortest[] = {0, 0, 0x80, 0x800, 0x10000};
      if (cp < shortest[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
      i += len;
    }
    return true;
  }
  // Input in a message: control characters JSON-style, U+2028 and U+2029 as
  // \u escapes, bytes that are not UTF-8 as \xHH; the rest as it is.
  static std::string Escape(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      const size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
      if (len == 0 || !IsUtf8(s.substr(i, len))) {
        absl::StrAppend(&out, absl::StrFormat("\\x%02X", c));
        ++i;
        continue;
      }
      uint32_t cp = len == 1 ? c : c & (0x7F >> len);
      for (size_t k = 1; k < len; ++k) {
        cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
      }
      static const std::map<uint32_t, std::string> named = {
          {'\b', "\\b"}, {'\f', "\\f"}, {'\n', "\\n"}, {'\r', "\\r"}, {'\t', "\\t"}};
      if (named.count(cp) > 0) {
        out += named.at(cp);
      } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029) {
        absl::StrAppend(&out, "\\u", absl::Hex(cp, absl::kZeroPad4));
      } else {
        out += s.substr(i, len);
      }
      i += len;
    }
    return out;
  }
  static std::string Cut(const std::string& value, size_t max) {
    if (value.size() <= max) return Escape(value);
    size_t cut = max;
    while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;
    return Escape(value.substr(0, cut)) + "...";
  }
  static std::string Quote(const std::string& value) {
    return absl::StrCat("'", Cut(value, 256), "'");
  }

  void Add(const std::string& path, const std::string& value, const std::string& constraint) {
    errors_.push_back(ValidationError{
        path, absl::StrCat("Value ", value, " at '", Cut(path, 1024),
                           "' failed to satisfy constraint: ", constraint)});
  }

  void CheckMessage(const Message& message, const std::string& path) {
    const google::protobuf::Descriptor* d = message.GetDescriptor();
    if (d->file() != v1::CreateTrainingJobRequest::descriptor()->file()) return;
    const RefShape* shape = model_.Find(d->name());
    if (shape == nullptr) return;
    const auto* r = message.GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* field = d->field(i);
      const RefMember* member = model_.MemberOf(*shape, field);
      if (member == nullptr) continue;
      const std::string member_path = Join(path, CamelCase(member->name));
      const bool present =
          field->is_repeated() ? r->FieldSize(message, field) > 0 : r->HasField(message, field);
      if (!present) {
        // A list or map the model allows empty is empty, not absent, to a
        // message (the two look the same), so it is never null.
        const bool may_be_empty = field->is_repeated() && member->shape->min.value_or(0) == 0;
        if (member->required && !may_be_empty) Add(member_path, "null", "Member must not be null");
        continue;
      }
      CheckField(message, field, *member->shape, member_path);
    }
  }

  void CheckField(const Message& message, const FieldDescriptor* field, const RefShape& shape,
                  const std::string& path) {
    const auto* r = message.GetReflection();
    if (field->is_map()) {
      CheckMap(message, field, shape, path);
      return;
    }
    if (field->is_repeated()) {
      const int size = r->FieldSize(message, field);
      std::string rendered = "'[...]'";
      if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
        std::vector<std::string> items;
        for (int i = 0; i < size; ++i) items.push_back(r->GetRepeatedString(message, field, i));
        rendered = Quote(absl::StrCat("[", absl::StrJoin(items, ", "), "]"));
      }
      CheckSize(size, shape, path, rendered);
      for (int i = 0; i < size; ++i) {
        const std::string element_path = absl::StrCat(path, ".", i + 1, ".member");
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          CheckMessage(r->GetRepeatedMessage(message, field, i), element_path);
        } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
          CheckString(r->GetRepeatedString(message, field, i), *shape.element, element_path);
        }
      }
      return;
    }
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        CheckMessage(r->GetMessage(message, field), path);
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        CheckString(r->GetString(message, field), shape, path);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        CheckNumber(r->GetInt32(message, field), shape, path);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        CheckNumber(r->GetInt64(message, field), shape, path);
        break;
      default:
        break;
    }
  }

  std::vector<std::string> StringViolations(const std::string& value, const RefShape& shape) {
    std::vector<std::string> out;
    const int64_t length = Utf16Length(value);
    if (shape.max && length > *shape.max) {
      out.push_back(absl::StrCat("Member must have length less than or equal to ", *shape.max));
    }
    if (shape.min && length < *shape.min) {
      out.push_back(absl::StrCat("Member must have length greater than or equal to ", *shape.min));
    }
    // (A string of no constraint at all, like StatusMessage, is not checked.)
    const bool constrained = shape.min || shape.max;
    if (constrained && shape.pattern == nullptr && shape.enum_values.empty() && !IsUtf8(value)) {
      out.push_back("Member must be valid UTF-8");
    }
    if (shape.pattern != nullptr && !shape.pattern->Matches(value)) {
      const bool local = options_.allow_local_uris && shape.name == "S3Uri";
      if (!(local && model_.local_uri().Matches(value))) {
        std::string constraint =
            absl::StrCat("Member must satisfy regular expression pattern: ^", *shape.pattern_text);
        if (local) absl::StrAppend(&constraint, " or ^file://.+");
        out.push_back(std::move(constraint));
      }
    }
    if (!shape.enum_values.empty() && shape.enum_set.count(value) == 0) {
      out.push_back(absl::StrCat("Member must satisfy enum value set: [",
                                 absl::StrJoin(shape.enum_values, ", "), "]"));
    }
    return out;
  }

  void CheckString(const std::string& value, const RefShape& shape, const std::string& path) {
    for (const std::string& constraint : StringViolations(value, shape)) {
      Add(path, Quote(value), constraint);
    }
  }

  void CheckNumber(int64_t value, const RefShape& shape, const std::string& path) {
    if (shape.max && value > *shape.max) {
      Add(path, Quote(absl::StrCat(value)),
          absl::StrCat("Member must have value less than or equal to ", *shape.max));
    }
    if (shape.min && value < *shape.min) {
      Add(path, Quote(absl::StrCat(value)),
          absl::StrCat("Member must have value greater than or equal to ", *shape.min));
    }
  }

  void CheckSize(int64_t size, const RefShape& shape, const std::string& path,
                 const std::string& rendered) {
    if (shape.max && size > *shape.max) {
      Add(path, rendered, absl::StrCat("Member must have length less than or equal to ", *shape.max));
    }
    if (shape.min && size < *shape.min) {
      Add(path, rendered,
          absl::StrCat("Member must have length greater than or equal to ", *shape.min));
    }
  }

  void CheckMap(const Message& message, const FieldDescriptor* field, const RefShape& shape,
                const std::string& path) {
    const auto* r = message.GetReflection();
    const int size = r->FieldSize(message, field);
    std::map<std::string, std::string> entries;  // key order
    const FieldDescriptor* key_field = field->message_type()->map_key();
    const FieldDescriptor* value_field = field->message_type()->map_value();
    for (int i = 0; i < size; ++i) {
      const Message& entry = r->GetRepeatedMessage(message, field, i);
      entries[entry.GetReflection()->GetString(entry, key_field)] =
          entry.GetReflection()->GetString(entry, value_field);
    }
    CheckSize(size, shape, path, absl::StrCat("'{", size, " entries}'"));
    for (const auto& [key, value] : entries) {
      std::vector<std::string> key_violations = StringViolations(key, *shape.key);
      if (!key_violations.empty()) {
        Add(path, Quote(key),
            absl::StrCat("Map keys must satisfy constraint: [", absl::StrJoin(key_violations, ", "),
                         "]"));
      }
      CheckString(value, *shape.value, Join(path, key));
    }
  }

  const ReferenceModel& model_;
  ValidationOptions options_;
  std::vector<ValidationError> errors_;
};

}  // namespace kiln::test

#endif  // KILN_TESTS_CORE_REFERENCE_VALIDATOR_H_
