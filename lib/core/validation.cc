#include "kiln/validation.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/internal/error_list.h"
#include "core/internal/regex.h"
#include "core/internal/shapes.h"
#include "kiln/cluster_provider.h"
#include "kiln/plugin/channel_layout.h"

namespace kiln {
namespace {

std::string Quote(const std::string& value) { return internal::QuoteValue(value); }

// Names met one by one (channel names, tag keys, group names): tells whether
// each was met before. Views into the request; nothing is allocated for the
// few names a request usually has.
class SeenBefore {
 public:
  // True when `name` was inserted before; records it either way.
  bool Insert(std::string_view name) {
    for (int i = 0; i < small_count_; ++i) {
      if (small_[i] == name) return true;
    }
    if (small_count_ < kSmall) {
      small_[small_count_++] = name;
      return false;
    }
    return !more_.insert(name).second;
  }

 private:
  static constexpr int kSmall = 16;
  std::array<std::string_view, kSmall> small_;
  int small_count_ = 0;
  std::set<std::string_view> more_;
};

// ---------------------------------------------------------------------------
// Cross-field rules of CreateTrainingJob.

// Violations go to `errors`, after the model's (one list bounds them all).
class CreateRules {
 public:
  CreateRules(const v1::CreateTrainingJobRequest& r, internal::ErrorList<ValidationError>& errors)
      : r_(r), errors_(errors) {}

  void Check() {
    CheckAlgorithm();
    CheckResources();
    CheckStopping();
    CheckChannels();
    CheckChannelLayout();
    CheckTags();
    if (r_.has_serverless_job_config()) {
      Add("serverlessJobConfig", "",
          "ServerlessJobConfig is not supported: Kiln runs container training jobs");
    }
  }

 private:
  void Add(const std::string& path, const std::string& value, const std::string& rule) {
    if (errors_.full()) {
      errors_.Count();
      return;
    }
    std::string message =
        value.empty() ? absl::StrCat("Invalid value at '", path, "': ", rule)
                      : absl::StrCat("Value ", value, " at '", path,
                                     "' failed to satisfy constraint: ", rule);
    errors_.Add(ValidationError{path, std::move(message)});
  }
  void AddVerbatim(const std::string& path, const std::string& message) {
    errors_.Add(ValidationError{path, message});
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
    SeenBefore names;
    for (int i = 0; i < rc.instance_groups_size(); ++i) {
      const auto& g = rc.instance_groups(i);
      auto path = [i] { return absl::StrCat("resourceConfig.instanceGroups.", i + 1, ".member"); };
      if (g.has_instance_group_name() && names.Insert(g.instance_group_name())) {
        Add(path() + ".instanceGroupName", Quote(g.instance_group_name()),
            "InstanceGroupName must be unique within the job");
      }
      if (g.has_instance_count() && g.instance_count() < 1) {
        Add(path() + ".instanceCount", Quote(absl::StrCat(g.instance_count())),
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
    std::set<std::string_view> group_names;
    for (const auto& g : r_.resource_config().instance_groups()) {
      group_names.insert(g.instance_group_name());
    }
    bool hetero = r_.resource_config().instance_groups_size() > 0;
    SeenBefore channel_names;
    for (int i = 0; i < r_.input_data_config_size(); ++i) {
      const v1::Channel& c = r_.input_data_config(i);
      // (Paths are built only for an error.)
      auto path = [i] { return absl::StrCat("inputDataConfig.", i + 1, ".member"); };
      if (c.has_channel_name() && channel_names.Insert(c.channel_name())) {
        Add(path() + ".channelName", Quote(c.channel_name()),
            "ChannelName must be unique within the job");
      }
      // The model's pattern allows them, but a File channel is the directory
      // /opt/ml/input/data/<ChannelName>: '.' would be data/ itself, '..' input/.
      if (c.channel_name() == "." || c.channel_name() == "..") {
        Add(path() + ".channelName", Quote(c.channel_name()),
            "ChannelName must not be '.' or '..': it names the channel's directory in "
            "/opt/ml/input/data");
      }
      const std::string& mode = EffectiveInputMode(r_, c);
      const auto& ds = c.data_source();
      int sources = ds.has_s3_data_source() + ds.has_file_system_data_source() +
                    ds.has_dataset_source();
      if (c.has_data_source() && sources != 1) {
        Add(path() + ".dataSource", "",
            "DataSource must hold exactly one of S3DataSource, FileSystemDataSource, "
            "DatasetSource");
      }
      if (ds.has_s3_data_source()) {
        const auto& s3 = ds.s3_data_source();
        const std::string& type = s3.s3_data_type();
        if (mode == "FastFile" && type != "S3Prefix") {
          Add(path() + ".dataSource.s3DataSource.s3DataType", Quote(type),
              "FastFile input mode supports only S3DataType S3Prefix");
        }
        if (type == "AugmentedManifestFile" && mode != "Pipe") {
          Add(path() + ".dataSource.s3DataSource.s3DataType", Quote(type),
              "AugmentedManifestFile requires Pipe input mode");
        }
        if (s3.attribute_names_size() > 0 && type != "AugmentedManifestFile") {
          Add(path() + ".dataSource.s3DataSource.attributeNames", "",
              "AttributeNames is allowed only with S3DataType AugmentedManifestFile");
        }
        for (int g = 0; g < s3.instance_group_names_size(); ++g) {
          const std::string& name = s3.instance_group_names(g);
          auto gpath = [&] {
            return absl::StrCat(path(), ".dataSource.s3DataSource.instanceGroupNames.", g + 1,
                                ".member");
          };
          if (!hetero) {
            Add(gpath(), Quote(name),
                "InstanceGroupNames requires ResourceConfig.InstanceGroups");
          } else if (!group_names.contains(name)) {
            Add(gpath(), Quote(name), "InstanceGroupNames must name an instance group declared in "
                                    "ResourceConfig.InstanceGroups");
          }
        }
      }
      if (ds.has_file_system_data_source()) {
        if (mode != "File") {
          Add(path() + ".inputMode", Quote(mode),
              "FileSystemDataSource channels must use File input mode");
        }
        if (!r_.has_vpc_config()) {
          Add(path() + ".dataSource.fileSystemDataSource", "",
              "FileSystemDataSource requires VpcConfig");
        }
      }
      if (c.has_compression_type() && c.compression_type() == "Gzip" && mode != "Pipe") {
        Add(path() + ".compressionType", Quote(c.compression_type()),
            "CompressionType Gzip is supported only in Pipe input mode");
      }
    }
  }

  // Kiln's rule (what the service does is not documented): channels whose
  // places in /opt/ml/input/data would be one path on an instance that
  // receives both, File channel "a_1" beside Pipe channel "a" (its epoch 1's
  // FIFO). Refused here, with the request, rather than failing the job when
  // its channels are set up. Reported at the File or FastFile channel, whose
  // name is the FIFO's.
  void CheckChannelLayout() {
    for (const ChannelLayoutCollision& c : ChannelLayoutCollisions(r_)) {
      Add(absl::StrCat("inputDataConfig.", c.directory + 1, ".member.channelName"), "",
          ChannelLayoutCollisionMessage(r_, c));
    }
  }

  void CheckTags() {
    SeenBefore keys;
    for (int i = 0; i < r_.tags_size(); ++i) {
      if (r_.tags(i).has_key() && keys.Insert(r_.tags(i).key())) {
        Add(absl::StrCat("tags.", i + 1, ".member.key"), Quote(r_.tags(i).key()),
            "Tag keys must be unique");
      }
    }
  }

  const v1::CreateTrainingJobRequest& r_;
  internal::ErrorList<ValidationError>& errors_;
};

// The model's constraints, then the cross-field rules.
internal::ErrorList<ValidationError> CreateViolations(
    internal::ShapeChecker& checker, const v1::CreateTrainingJobRequest& request) {
  internal::CheckShape(checker, request);
  CreateRules(request, checker.errors()).Check();
  return checker.Take();
}

// "N validation error(s) detected: m1; m2", listing the first
// kMaxReportedViolations of `errors` and counting the rest of `total`.
std::string FormatValidationText(const std::vector<ValidationError>& errors, int64_t total) {
  const size_t listed = std::min(errors.size(), static_cast<size_t>(kMaxReportedViolations));
  std::string text = absl::StrCat(total, total == 1 ? " validation error" : " validation errors",
                                  " detected: ");
  for (size_t i = 0; i < listed; ++i) {
    if (i > 0) text += "; ";
    text += errors[i].message;
  }
  if (total > static_cast<int64_t>(listed)) {
    absl::StrAppend(&text, "; and ", total - static_cast<int64_t>(listed), " more");
  }
  return text;
}

}  // namespace

// The model's constraints are checked by code generated from the model
// (lib/core/schema/shape_checks.cc, through core/internal/shapes.h).
std::vector<ValidationError> CheckShapeConstraints(const google::protobuf::Message& message,
                                                   const ValidationOptions& options) {
  internal::ShapeChecker checker(options);
  internal::CheckShape(checker, message);  // nothing to check outside the model
  return std::move(checker.errors().kept());
}

std::string FormatValidationErrors(const std::vector<ValidationError>& errors) {
  return FormatValidationText(errors, static_cast<int64_t>(errors.size()));
}

absl::Status ValidateCreateTrainingJobRequest(const v1::CreateTrainingJobRequest& request,
                                              const ValidationOptions& options) {
  internal::ShapeChecker checker(options);
  internal::ErrorList<ValidationError> errors = CreateViolations(checker, request);
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(internal::FormatViolations(errors));
}

namespace {

// A request without cross-field rules: the model's constraints only.
template <class Request>
absl::Status ValidateShape(const Request& request, const ValidationOptions& options) {
  internal::ShapeChecker checker(options);
  internal::CheckShape(checker, request);
  if (checker.errors().empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(internal::FormatViolations(checker.errors()));
}

}  // namespace

absl::Status ValidateRequest(const v1::CreateTrainingJobRequest& request,
                             const ValidationOptions& options) {
  return ValidateCreateTrainingJobRequest(request, options);
}
absl::Status ValidateRequest(const v1::DescribeTrainingJobRequest& request,
                             const ValidationOptions& options) {
  return ValidateShape(request, options);
}
absl::Status ValidateRequest(const v1::ListTrainingJobsRequest& request,
                             const ValidationOptions& options) {
  return ValidateShape(request, options);
}
absl::Status ValidateRequest(const v1::StopTrainingJobRequest& request,
                             const ValidationOptions& options) {
  return ValidateShape(request, options);
}
absl::Status ValidateRequest(const v1::UpdateTrainingJobRequest& request,
                             const ValidationOptions& options) {
  return ValidateShape(request, options);
}
absl::Status ValidateRequest(const v1::DeleteTrainingJobRequest& request,
                             const ValidationOptions& options) {
  return ValidateShape(request, options);
}

absl::Status ValidateRequest(const google::protobuf::Message& request,
                             const ValidationOptions& options) {
  internal::ShapeChecker checker(options);
  internal::ErrorList<ValidationError> errors = internal::ValidateWith(checker, request);
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(internal::FormatViolations(errors));
}

namespace internal {

ErrorList<ValidationError> ValidateWith(ShapeChecker& checker,
                                        const google::protobuf::Message& request) {
  if (const auto* create = dynamic_cast<const v1::CreateTrainingJobRequest*>(&request)) {
    return CreateViolations(checker, *create);
  }
  CheckShape(checker, request);  // nothing to check outside the model
  return checker.Take();
}

std::string FormatViolations(const ErrorList<ValidationError>& errors) {
  return FormatValidationText(errors.kept(), errors.total());
}

}  // namespace internal

}  // namespace kiln
