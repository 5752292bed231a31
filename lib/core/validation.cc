#include "kiln/validation.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/internal/shapes.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace kiln {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using internal::Member;
using internal::Shape;
using internal::ShapeModel;

constexpr size_t kMaxValueInMessage = 256;
constexpr char kLocalUriPattern[] = "file://.+";

// A generated message type bound to its shape: each field with the member it
// stands for, in the proto's (= the model's) member order.
struct BoundField {
  const FieldDescriptor* field;
  const Member* member;
  std::string camel_name;  // the member's name as the service writes it in paths
};
struct Binding {
  const Shape* shape = nullptr;
  std::vector<BoundField> fields;
};

class Bindings {
 public:
  static const Bindings& Get() {
    static const Bindings* bindings = new Bindings();
    return *bindings;
  }
  const Binding* Find(const Descriptor* d) const {
    auto it = by_descriptor_.find(d);
    return it == by_descriptor_.end() ? nullptr : &it->second;
  }
  const internal::Regex& local_uri() const { return *local_uri_; }

 private:
  Bindings() {
    const ShapeModel& model = ShapeModel::Get();
    const auto* file = v1::CreateTrainingJobRequest::descriptor()->file();
    for (int i = 0; i < file->message_type_count(); ++i) {
      const Descriptor* d = file->message_type(i);
      Binding binding;
      binding.shape = model.Find(d->name());
      if (binding.shape == nullptr) continue;
      for (int f = 0; f < d->field_count(); ++f) {
        const FieldDescriptor* field = d->field(f);
        for (const Member& member : binding.shape->members) {
          if (member.name == field->json_name()) {
            std::string camel = member.name;
            camel[0] = absl::ascii_tolower(static_cast<unsigned char>(camel[0]));
            binding.fields.push_back(BoundField{field, &member, std::move(camel)});
            break;
          }
        }
      }
      by_descriptor_[d] = std::move(binding);
    }
    std::string error;
    local_uri_ = internal::Regex::Compile(kLocalUriPattern, internal::Regex::Mode::kFullMatch, &error);
  }
  absl::flat_hash_map<const Descriptor*, Binding> by_descriptor_;
  std::unique_ptr<internal::Regex> local_uri_;
};

// Length as the service counts it (Java String length: UTF-16 code units).
int64_t Utf16Length(const std::string& s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    n += len == 4 ? 2 : 1;
    i += len;
  }
  return n;
}

std::string Quote(const std::string& value) {
  if (value.size() <= kMaxValueInMessage) return absl::StrCat("'", value, "'");
  // Cut on a UTF-8 boundary.
  size_t cut = kMaxValueInMessage;
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat("'", value.substr(0, cut), "...'");
}

// Walks a message depth first. The path of the member being checked is kept as
// a stack of parts and turned into text only when a violation is reported, so
// a valid request costs no string building.
class Checker {
 public:
  explicit Checker(const ValidationOptions& options) : options_(options) {}

  void CheckMessage(const Message& message) {
    const Binding* binding = Bindings::Get().Find(message.GetDescriptor());
    if (binding == nullptr) return;  // not a model message (e.g. Timestamp)
    const Reflection* r = message.GetReflection();
    for (const BoundField& b : binding->fields) {
      bool present = b.field->is_repeated() ? r->FieldSize(message, b.field) > 0
                                            : r->HasField(message, b.field);
      if (!present && !b.member->required) continue;
      path_.push_back(PathPart{&b.camel_name, 0, nullptr});
      if (present) {
        CheckField(message, b.field, *b.member->shape);
      } else {
        Add("null", "Member must not be null");
      }
      path_.pop_back();
    }
  }

  std::vector<ValidationError> Take() { return std::move(errors_); }

 private:
  // One step of a path: a member name, a list element (".N.member") or a map
  // key.
  struct PathPart {
    const std::string* name;
    int index;
    const std::string* key;
  };

  std::string PathText() const {
    std::string out;
    for (const PathPart& p : path_) {
      if (p.name == nullptr && p.key == nullptr) {
        absl::StrAppend(&out, ".", p.index, ".member");
        continue;
      }
      if (!out.empty()) out += '.';
      out += p.name != nullptr ? *p.name : *p.key;
    }
    return out;
  }

  void Add(const std::string& value, const std::string& constraint) {
    std::string path = PathText();
    std::string message = absl::StrCat("Value ", value, " at '", path,
                                       "' failed to satisfy constraint: ", constraint);
    errors_.push_back(ValidationError{std::move(path), std::move(message)});
  }

  void CheckField(const Message& message, const FieldDescriptor* field, const Shape& shape) {
    const Reflection* r = message.GetReflection();
    if (field->is_map()) {
      CheckMap(message, field, shape);
      return;
    }
    if (field->is_repeated()) {
      const int size = r->FieldSize(message, field);
      CheckSize(size, shape, [&] {
        if (field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) return std::string("'[...]'");
        std::vector<std::string> items;
        for (int i = 0; i < size; ++i) items.push_back(r->GetRepeatedString(message, field, i));
        return Quote(absl::StrCat("[", absl::StrJoin(items, ", "), "]"));
      });
      for (int i = 0; i < size; ++i) {
        path_.push_back(PathPart{nullptr, i + 1, nullptr});
        if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
          CheckMessage(r->GetRepeatedMessage(message, field, i));
        } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
          std::string scratch;
          CheckString(r->GetRepeatedStringReference(message, field, i, &scratch), *shape.element);
        }
        path_.pop_back();
      }
      return;
    }
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        CheckMessage(r->GetMessage(message, field));
        break;
      case FieldDescriptor::CPPTYPE_STRING: {
        std::string scratch;
        CheckString(r->GetStringReference(message, field, &scratch), shape);
        break;
      }
      case FieldDescriptor::CPPTYPE_INT32:
        CheckNumber(r->GetInt32(message, field), shape);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        CheckNumber(r->GetInt64(message, field), shape);
        break;
      default:
        break;  // booleans and floats carry no constraints in the model
    }
  }

  // Appends the failed constraints of a string against its shape to `out`.
  void StringViolations(const std::string& value, const Shape& shape,
                        std::vector<std::string>& out) {
    const int64_t length = Utf16Length(value);
    if (shape.max && length > *shape.max) {
      out.push_back(absl::StrCat("Member must have length less than or equal to ", *shape.max));
    }
    if (shape.min && length < *shape.min) {
      out.push_back(absl::StrCat("Member must have length greater than or equal to ", *shape.min));
    }
    if (shape.pattern != nullptr && !shape.pattern->Matches(value)) {
      const bool s3_uri = shape.name == "S3Uri";
      if (!(options_.allow_local_uris && s3_uri && Bindings::Get().local_uri().Matches(value))) {
        std::string constraint =
            absl::StrCat("Member must satisfy regular expression pattern: ^", shape.pattern->text());
        if (options_.allow_local_uris && s3_uri) {
          absl::StrAppend(&constraint, " or ^", kLocalUriPattern);
        }
        out.push_back(std::move(constraint));
      }
    }
    if (!shape.enum_values.empty() && !shape.enum_set.contains(value)) {
      out.push_back(absl::StrCat("Member must satisfy enum value set: [",
                                 absl::StrJoin(shape.enum_values, ", "), "]"));
    }
  }

  void CheckString(const std::string& value, const Shape& shape) {
    violations_.clear();
    StringViolations(value, shape, violations_);
    for (const std::string& constraint : violations_) Add(Quote(value), constraint);
  }

  void CheckNumber(int64_t value, const Shape& shape) {
    if (shape.max && value > *shape.max) {
      Add(Quote(absl::StrCat(value)),
          absl::StrCat("Member must have value less than or equal to ", *shape.max));
    }
    if (shape.min && value < *shape.min) {
      Add(Quote(absl::StrCat(value)),
          absl::StrCat("Member must have value greater than or equal to ", *shape.min));
    }
  }

  // `render` produces the value for the message, only when one is needed.
  template <typename Render>
  void CheckSize(int64_t size, const Shape& shape, Render render) {
    if (shape.max && size > *shape.max) {
      Add(render(), absl::StrCat("Member must have length less than or equal to ", *shape.max));
    }
    if (shape.min && size < *shape.min) {
      Add(render(), absl::StrCat("Member must have length greater than or equal to ", *shape.min));
    }
  }

  void CheckMap(const Message& message, const FieldDescriptor* field, const Shape& shape) {
    const Reflection* r = message.GetReflection();
    const int size = r->FieldSize(message, field);
    CheckSize(size, shape, [&] { return absl::StrCat("'{", size, " entries}'"); });
    // Entries in key order: protobuf's map order is unspecified.
    const FieldDescriptor* key_field = field->message_type()->map_key();
    const FieldDescriptor* value_field = field->message_type()->map_value();
    std::vector<std::pair<std::string, std::string>> entries;
    entries.reserve(size);
    for (int i = 0; i < size; ++i) {
      const Message& entry = r->GetRepeatedMessage(message, field, i);
      entries.emplace_back(entry.GetReflection()->GetString(entry, key_field),
                           entry.GetReflection()->GetString(entry, value_field));
    }
    std::sort(entries.begin(), entries.end());
    for (const auto& [key, value] : entries) {
      violations_.clear();
      StringViolations(key, *shape.key, violations_);
      if (!violations_.empty()) {
        Add(Quote(key), absl::StrCat("Map keys must satisfy constraint: [",
                                     absl::StrJoin(violations_, ", "), "]"));
      }
      path_.push_back(PathPart{nullptr, 0, &key});
      CheckString(value, *shape.value);
      path_.pop_back();
    }
  }

  const ValidationOptions& options_;
  std::vector<PathPart> path_;
  std::vector<std::string> violations_;  // scratch
  std::vector<ValidationError> errors_;
};

// ---------------------------------------------------------------------------
// Cross-field rules of CreateTrainingJob.

class CreateRules {
 public:
  explicit CreateRules(const v1::CreateTrainingJobRequest& r) : r_(r) {}

  std::vector<ValidationError> Check() {
    CheckAlgorithm();
    CheckResources();
    CheckStopping();
    CheckChannels();
    CheckTags();
    if (r_.has_serverless_job_config()) {
      Add("serverlessJobConfig", "",
          "ServerlessJobConfig is not supported: Kiln runs container training jobs");
    }
    return std::move(errors_);
  }

 private:
  void Add(const std::string& path, const std::string& value, const std::string& rule) {
    std::string message =
        value.empty() ? absl::StrCat("Invalid value at '", path, "': ", rule)
                      : absl::StrCat("Value ", value, " at '", path,
                                     "' failed to satisfy constraint: ", rule);
    errors_.push_back(ValidationError{path, std::move(message)});
  }
  void AddVerbatim(const std::string& path, const std::string& message) {
    errors_.push_back(ValidationError{path, message});
  }

  void CheckAlgorithm() {
    if (!r_.has_algorithm_specification()) {
      Add("algorithmSpecification", "null",
          "Member must not be null (a container training job needs AlgorithmSpecification)");
      return;
    }
    const auto& a = r_.algorithm_specification();
    if (a.has_training_image() == a.has_algorithm_name()) {
      Add("algorithmSpecification", "",
          a.has_training_image() ? "specify either TrainingImage or AlgorithmName, not both"
                                 : "specify either TrainingImage or AlgorithmName");
    }
    if (a.has_training_image() && a.training_image().empty()) {
      Add("algorithmSpecification.trainingImage", "''", "TrainingImage must not be empty");
    }
    for (int i = 0; i < a.metric_definitions_size(); ++i) {
      const auto& m = a.metric_definitions(i);
      std::string error;
      if (m.has_regex() && !m.regex().empty() &&
          internal::Regex::Compile(m.regex(), internal::Regex::Mode::kSearch, &error) == nullptr) {
        Add(absl::StrCat("algorithmSpecification.metricDefinitions.", i + 1, ".member.regex"),
            Quote(m.regex()), absl::StrCat("Member must be a valid regular expression: ", error));
      }
    }
  }

  void CheckResources() {
    if (!r_.has_resource_config()) {
      Add("resourceConfig", "null",
          "Member must not be null (a container training job needs ResourceConfig)");
      return;
    }
    const auto& rc = r_.resource_config();
    bool homogeneous = rc.has_instance_type() || rc.has_instance_count();
    bool groups = rc.instance_groups_size() > 0;
    if (homogeneous && groups) {
      Add("resourceConfig", "",
          "specify either InstanceType and InstanceCount, or InstanceGroups, not both");
    } else if (!homogeneous && !groups) {
      Add("resourceConfig", "", "specify either InstanceType and InstanceCount, or InstanceGroups");
    } else if (homogeneous) {
      if (!rc.has_instance_type()) {
        Add("resourceConfig.instanceType", "null", "InstanceType is required with InstanceCount");
      }
      if (!rc.has_instance_count()) {
        Add("resourceConfig.instanceCount", "null", "InstanceCount is required with InstanceType");
      } else if (rc.instance_count() < 1) {
        Add("resourceConfig.instanceCount", Quote(absl::StrCat(rc.instance_count())),
            "InstanceCount must be at least 1");
      }
    }
    std::set<std::string> names;
    for (int i = 0; i < rc.instance_groups_size(); ++i) {
      const auto& g = rc.instance_groups(i);
      std::string path = absl::StrCat("resourceConfig.instanceGroups.", i + 1, ".member");
      if (g.has_instance_group_name() && !names.insert(g.instance_group_name()).second) {
        Add(path + ".instanceGroupName", Quote(g.instance_group_name()),
            "InstanceGroupName must be unique within the job");
      }
      if (g.has_instance_count() && g.instance_count() < 1) {
        Add(path + ".instanceCount", Quote(absl::StrCat(g.instance_count())),
            "InstanceCount must be at least 1");
      }
    }
    if (rc.has_keep_alive_period_in_seconds() && rc.keep_alive_period_in_seconds() > 0) {
      std::string value = Quote(absl::StrCat(rc.keep_alive_period_in_seconds()));
      if (groups) {
        Add("resourceConfig.keepAlivePeriodInSeconds", value,
            "KeepAlivePeriodInSeconds (warm pools) is not supported with InstanceGroups "
            "(heterogeneous clusters)");
      }
      if (r_.enable_managed_spot_training()) {
        Add("resourceConfig.keepAlivePeriodInSeconds", value,
            "KeepAlivePeriodInSeconds (warm pools) is not supported with "
            "EnableManagedSpotTraining");
      }
    }
  }

  void CheckStopping() {
    const auto& sc = r_.stopping_condition();
    bool spot = r_.enable_managed_spot_training();
    if (sc.has_max_wait_time_in_seconds() && !spot) {
      AddVerbatim("stoppingCondition.maxWaitTimeInSeconds",
                  "Invalid MaxWaitTimeInSeconds. It is only supported when "
                  "EnableManagedSpotTraining is set to true");
    }
    if (spot && !sc.has_max_wait_time_in_seconds()) {
      Add("stoppingCondition.maxWaitTimeInSeconds", "null",
          "MaxWaitTimeInSeconds is required when EnableManagedSpotTraining is true");
    }
    int64_t max_runtime = sc.has_max_runtime_in_seconds() ? sc.max_runtime_in_seconds() : 86400;
    if (spot && sc.has_max_wait_time_in_seconds() && sc.max_wait_time_in_seconds() < max_runtime) {
      Add("stoppingCondition.maxWaitTimeInSeconds", Quote(absl::StrCat(sc.max_wait_time_in_seconds())),
          absl::StrCat("MaxWaitTimeInSeconds must be greater than or equal to "
                       "MaxRuntimeInSeconds (",
                       max_runtime, sc.has_max_runtime_in_seconds() ? ")" : ", the default)"));
    }
    if (sc.has_max_runtime_in_seconds() && sc.max_runtime_in_seconds() > 2419200) {
      Add("stoppingCondition.maxRuntimeInSeconds", Quote(absl::StrCat(sc.max_runtime_in_seconds())),
          "MaxRuntimeInSeconds must be at most 2419200 (28 days)");
    }
  }

  void CheckChannels() {
    const std::string default_mode = r_.algorithm_specification().training_input_mode();
    std::set<std::string> group_names;
    for (const auto& g : r_.resource_config().instance_groups()) {
      group_names.insert(g.instance_group_name());
    }
    bool hetero = r_.resource_config().instance_groups_size() > 0;
    std::set<std::string> channel_names;
    for (int i = 0; i < r_.input_data_config_size(); ++i) {
      const v1::Channel& c = r_.input_data_config(i);
      std::string path = absl::StrCat("inputDataConfig.", i + 1, ".member");
      if (c.has_channel_name() && !channel_names.insert(c.channel_name()).second) {
        Add(path + ".channelName", Quote(c.channel_name()),
            "ChannelName must be unique within the job");
      }
      const std::string mode = c.has_input_mode() ? c.input_mode() : default_mode;
      const auto& ds = c.data_source();
      int sources = ds.has_s3_data_source() + ds.has_file_system_data_source() +
                    ds.has_dataset_source();
      if (c.has_data_source() && sources != 1) {
        Add(path + ".dataSource", "",
            "DataSource must hold exactly one of S3DataSource, FileSystemDataSource, "
            "DatasetSource");
      }
      if (ds.has_s3_data_source()) {
        const auto& s3 = ds.s3_data_source();
        const std::string type = s3.s3_data_type();
        if (mode == "FastFile" && type != "S3Prefix") {
          Add(path + ".dataSource.s3DataSource.s3DataType", Quote(type),
              "FastFile input mode supports only S3DataType S3Prefix");
        }
        if (type == "AugmentedManifestFile" && mode != "Pipe") {
          Add(path + ".dataSource.s3DataSource.s3DataType", Quote(type),
              "AugmentedManifestFile requires Pipe input mode");
        }
        if (s3.attribute_names_size() > 0 && type != "AugmentedManifestFile") {
          Add(path + ".dataSource.s3DataSource.attributeNames", "",
              "AttributeNames is allowed only with S3DataType AugmentedManifestFile");
        }
        for (int g = 0; g < s3.instance_group_names_size(); ++g) {
          const std::string& name = s3.instance_group_names(g);
          std::string gpath =
              absl::StrCat(path, ".dataSource.s3DataSource.instanceGroupNames.", g + 1, ".member");
          if (!hetero) {
            Add(gpath, Quote(name),
                "InstanceGroupNames requires ResourceConfig.InstanceGroups");
          } else if (!group_names.contains(name)) {
            Add(gpath, Quote(name), "InstanceGroupNames must name an instance group declared in "
                                    "ResourceConfig.InstanceGroups");
          }
        }
      }
      if (ds.has_file_system_data_source()) {
        if (mode != "File") {
          Add(path + ".inputMode", Quote(mode),
              "FileSystemDataSource channels must use File input mode");
        }
        if (!r_.has_vpc_config()) {
          Add(path + ".dataSource.fileSystemDataSource", "",
              "FileSystemDataSource requires VpcConfig");
        }
      }
      if (c.has_compression_type() && c.compression_type() == "Gzip" && mode != "Pipe") {
        Add(path + ".compressionType", Quote(c.compression_type()),
            "CompressionType Gzip is supported only in Pipe input mode");
      }
    }
  }

  void CheckTags() {
    std::set<std::string> keys;
    for (int i = 0; i < r_.tags_size(); ++i) {
      if (r_.tags(i).has_key() && !keys.insert(r_.tags(i).key()).second) {
        Add(absl::StrCat("tags.", i + 1, ".member.key"), Quote(r_.tags(i).key()),
            "Tag keys must be unique");
      }
    }
  }

  const v1::CreateTrainingJobRequest& r_;
  std::vector<ValidationError> errors_;
};

}  // namespace

std::vector<ValidationError> CheckShapeConstraints(const google::protobuf::Message& message,
                                                   const ValidationOptions& options) {
  Checker checker(options);
  checker.CheckMessage(message);
  return checker.Take();
}

std::string FormatValidationErrors(const std::vector<ValidationError>& errors) {
  std::vector<std::string> messages;
  messages.reserve(errors.size());
  for (const auto& e : errors) messages.push_back(e.message);
  return absl::StrCat(errors.size(), errors.size() == 1 ? " validation error" : " validation errors",
                      " detected: ", absl::StrJoin(messages, "; "));
}

absl::Status ValidateCreateTrainingJobRequest(const v1::CreateTrainingJobRequest& request,
                                              const ValidationOptions& options) {
  std::vector<ValidationError> errors = CheckShapeConstraints(request, options);
  std::vector<ValidationError> rules = CreateRules(request).Check();
  errors.insert(errors.end(), std::make_move_iterator(rules.begin()),
                std::make_move_iterator(rules.end()));
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(FormatValidationErrors(errors));
}

absl::Status ValidateRequest(const google::protobuf::Message& request,
                             const ValidationOptions& options) {
  if (const auto* create = dynamic_cast<const v1::CreateTrainingJobRequest*>(&request)) {
    return ValidateCreateTrainingJobRequest(*create, options);
  }
  std::vector<ValidationError> errors = CheckShapeConstraints(request, options);
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(FormatValidationErrors(errors));
}

}  // namespace kiln
