#include "local/internal/container_config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kiln/cluster_provider.h"
#include "local/internal/fs.h"

namespace kiln::local::internal {
namespace {

using kiln::ParseJsonValue;
using kiln::WriteJson;

// Decodes one UTF-8 code point at `s[i]`, advancing `i`; U+FFFD for an invalid
// sequence (one byte consumed).
uint32_t NextCodePoint(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len; ++k) {
    const unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc >> 6) != 0x2) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += len;
  return cp;
}

// json.dumps of a str with ensure_ascii=True.
void AppendPyJsonString(std::string_view s, std::string& out) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = NextCodePoint(s, i);
    switch (cp) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (cp >= 0x20 && cp < 0x7F) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x10000) {
      absl::StrAppendFormat(&out, "\\u%04x", cp);
    } else {
      const uint32_t v = cp - 0x10000;
      absl::StrAppendFormat(&out, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    }
  }
  out.push_back('"');
}

// repr() of a str: single quotes unless the text has ' and no ".
void AppendPyReprString(std::string_view s, std::string& out) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  out.push_back(quote);
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    const uint32_t cp = NextCodePoint(s, i);
    if (cp == static_cast<uint32_t>(quote) || cp == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(cp));
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", cp);
    } else {
      out.append(s.substr(start, i - start));
    }
  }
  out.push_back(quote);
}

// Python's int from a JSON integer lexeme ("-0" is 0).
std::string PyInt(const std::string& lexeme) {
  if (lexeme == "-0") return "0";
  return lexeme;
}

bool IsInteger(const JsonValue& v) { return v.is_number() && v.IsIntegerLexeme(); }

// The float a JSON number with a fraction or exponent becomes.
double PyFloat(const JsonValue& v) {
  absl::StatusOr<double> d = v.AsDouble();
  if (d.ok()) return *d;
  // Too large for a double: Python gives an infinity.
  return absl::StartsWith(v.number_lexeme(), "-") ? -HUGE_VAL : HUGE_VAL;
}

bool Truthy(const JsonValue* v) {
  if (v == nullptr) return false;
  switch (v->kind()) {
    case JsonValue::Kind::kNull:
      return false;
    case JsonValue::Kind::kBool:
      return v->bool_value();
    case JsonValue::Kind::kNumber:
      return IsInteger(*v) ? PyInt(v->number_lexeme()) != "0" : PyFloat(*v) != 0.0;
    case JsonValue::Kind::kString:
      return !v->string_value().empty();
    case JsonValue::Kind::kArray:
      return !v->elements().empty();
    case JsonValue::Kind::kObject:
      return !v->members().empty();
  }
  return false;
}

JsonValue Str(std::string s) { return JsonValue::String(std::move(s)); }

JsonValue StrList(const std::vector<std::string>& items) {
  JsonValue a = JsonValue::Array();
  for (const std::string& s : items) a.Push(Str(s));
  return a;
}

// A JSON object with members in sorted key order (map iteration).
JsonValue ObjectOf(const std::map<std::string, JsonValue>& members) {
  JsonValue o = JsonValue::Object();
  for (const auto& [k, v] : members) o.Set(k, v);
  return o;
}

std::string PathJoin(const std::string& a, std::string_view b) { return absl::StrCat(a, "/", Av(b)); }

// The keys the toolkit treats as SageMaker's own (params.SAGEMAKER_HYPERPARAMETERS).
const std::set<std::string, std::less<>>& SageMakerHyperparameters() {
  static const auto* const kKeys = new std::set<std::string, std::less<>>{
      "sagemaker_program",     "sagemaker_submit_directory", "sagemaker_enable_cloudwatch_metrics",
      "sagemaker_region",      "sagemaker_container_log_level", "sagemaker_job_name",
      "default_user_module_name", "_tuning_objective_metric", "sagemaker_s3_output"};
  return *kKeys;
}

// Framework flags that put the current group into distribution_instance_groups.
constexpr const char* kDistributionFlags[] = {
    "sagemaker_mpi_enabled",
    "sagemaker_parameter_server_enabled",
    "sagemaker_distributed_dataparallel_enabled",
    "sagemaker_pytorch_ddp_enabled",
    "sagemaker_pytorch_xla_multi_worker_enabled",
    "sagemaker_multi_worker_mirrored_strategy_enabled",
    "sagemaker_torch_distributed_enabled",
};

const JsonValue* FindIn(const std::map<std::string, JsonValue>& m, std::string_view key) {
  auto it = m.find(std::string(key));
  return it == m.end() ? nullptr : &it->second;
}

}  // namespace

JsonValue DecodeHyperparameter(std::string_view raw) {
  absl::StatusOr<JsonValue> v = ParseJsonValue(raw);
  if (v.ok()) return *std::move(v);
  return Str(std::string(raw));
}

std::string PyFloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(end - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, e)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = 0;
  std::string_view exp_text = sci.substr(e + 1);
  if (!exp_text.empty() && exp_text.front() == '+') exp_text.remove_prefix(1);
  std::from_chars(exp_text.data(), exp_text.data() + exp_text.size(), exp);
  const int decpt = exp + 1;
  const int n = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (decpt >= n) {
      out += digits;
      out.append(static_cast<size_t>(decpt - n), '0');
      out += ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt));
      out.push_back('.');
      out += digits.substr(static_cast<size_t>(decpt));
    }
    return out;
  }
  out.push_back(digits[0]);
  if (n > 1) {
    out.push_back('.');
    out += digits.substr(1);
  }
  absl::StrAppendFormat(&out, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out;
}

std::string PyJsonDumps(const JsonValue& value) {
  switch (value.kind()) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return value.bool_value() ? "true" : "false";
    case JsonValue::Kind::kNumber: {
      if (IsInteger(value)) return PyInt(value.number_lexeme());
      const double d = PyFloat(value);
      if (std::isnan(d)) return "NaN";
      if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
      return PyFloatRepr(d);
    }
    case JsonValue::Kind::kString: {
      std::string out;
      AppendPyJsonString(value.string_value(), out);
      return out;
    }
    case JsonValue::Kind::kArray: {
      std::string out = "[";
      bool first = true;
      for (const JsonValue& e : value.elements()) {
        if (!first) out.push_back(',');
        first = false;
        out += PyJsonDumps(e);
      }
      out.push_back(']');
      return out;
    }
    case JsonValue::Kind::kObject: {
      std::vector<const JsonValue::Member*> members;
      for (const JsonValue::Member& m : value.members()) members.push_back(&m);
      std::sort(members.begin(), members.end(),
                [](const auto* a, const auto* b) { return a->first < b->first; });
      std::string out = "{";
      bool first = true;
      for (const JsonValue::Member* m : members) {
        if (!first) out.push_back(',');
        first = false;
        AppendPyJsonString(m->first, out);
        out.push_back(':');
        out += PyJsonDumps(m->second);
      }
      out.push_back('}');
      return out;
    }
  }
  return "null";
}

std::string PyRepr(const JsonValue& value) {
  switch (value.kind()) {
    case JsonValue::Kind::kNull:
      return "None";
    case JsonValue::Kind::kBool:
      return value.bool_value() ? "True" : "False";
    case JsonValue::Kind::kNumber:
      return IsInteger(value) ? PyInt(value.number_lexeme()) : PyFloatRepr(PyFloat(value));
    case JsonValue::Kind::kString: {
      std::string out;
      AppendPyReprString(value.string_value(), out);
      return out;
    }
    case JsonValue::Kind::kArray: {
      std::vector<std::string> parts;
      for (const JsonValue& e : value.elements()) parts.push_back(PyRepr(e));
      return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
    }
    case JsonValue::Kind::kObject: {
      std::vector<std::string> parts;
      for (const JsonValue::Member& m : value.members()) {
        std::string key;
        AppendPyReprString(m.first, key);
        parts.push_back(absl::StrCat(key, ": ", PyRepr(m.second)));
      }
      return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
    }
  }
  return "None";
}

std::string PyStr(const JsonValue& value) {
  if (value.is_string()) return value.string_value();
  return PyRepr(value);
}

std::string ToEnvValue(const JsonValue& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.string_value();
  return PyJsonDumps(value);
}

absl::Status WriteConfigFiles(const ContainerConfig& config, const std::string& dir) {
  const std::pair<const char*, const std::string*> files[] = {
      {"hyperparameters.json", &config.hyperparameters_json},
      {"inputdataconfig.json", &config.inputdataconfig_json},
      {"resourceconfig.json", &config.resourceconfig_json},
  };
  for (const auto& [name, data] : files) {
    absl::Status s = WriteFileAtomic(PathJoin(dir, name), *data);
    if (!s.ok()) return s;
  }
  if (config.hosts.empty()) return absl::OkStatus();
  return WriteFileAtomic(PathJoin(dir, "hosts"), config.hosts);
}

std::string RegionOfArn(std::string_view arn) {
  std::vector<absl::string_view> parts = absl::StrSplit(Av(arn), ':');
  if (parts.size() < 6 || parts[0] != "arn") return "";
  return std::string(parts[3]);
}

ContainerConfig BuildContainerConfig(const ContainerConfigInput& in) {
  const v1::CreateTrainingJobRequest& request = *in.request;
  const Cluster& cluster = *in.cluster;
  const Instance& self = *in.instance;
  ContainerConfig config;

  // --- hyperparameters.json: the map verbatim, keys sorted.
  std::map<std::string, std::string> raw_hps(request.hyper_parameters().begin(),
                                             request.hyper_parameters().end());
  {
    JsonValue hp = JsonValue::Object();
    for (const auto& [k, v] : raw_hps) hp.Set(k, Str(v));
    config.hyperparameters_json = WriteJson(hp);
  }

  // --- resourceconfig.json
  std::vector<std::string> hosts;
  std::vector<std::string> group_order;
  std::map<std::string, std::pair<std::string, std::vector<std::string>>> groups;  // type, hosts
  for (const Instance& i : cluster.instances) {
    hosts.push_back(i.host_name);
    auto [it, inserted] = groups.try_emplace(i.group_name);
    if (inserted) {
      group_order.push_back(i.group_name);
      it->second.first = i.instance_type;
    }
    it->second.second.push_back(i.host_name);
  }
  std::sort(hosts.begin(), hosts.end());
  JsonValue instance_groups = JsonValue::Array();
  std::map<std::string, JsonValue> instance_groups_dict;
  for (const std::string& name : group_order) {
    const auto& [type, group_hosts] = groups[name];
    JsonValue g = JsonValue::Object();
    g.Set("instance_group_name", Str(name))
        .Set("instance_type", Str(type))
        .Set("hosts", StrList(group_hosts));
    instance_groups.Push(g);
    instance_groups_dict[name] = g;
  }
  JsonValue resource = JsonValue::Object();
  resource.Set("current_host", Str(self.host_name))
      .Set("current_instance_type", Str(self.instance_type))
      .Set("current_group_name", Str(self.group_name))
      .Set("hosts", StrList(hosts))
      .Set("instance_groups", instance_groups)
      .Set("network_interface_name", Str(in.network_interface_name));
  config.resourceconfig_json = WriteJson(resource);

  // --- inputdataconfig.json: the channels this instance's group receives.
  std::map<std::string, JsonValue> input_data;
  for (const v1::Channel& channel : request.input_data_config()) {
    const auto& s3 = channel.data_source().s3_data_source();
    if (!ChannelReachesGroup(channel, self.group_name)) continue;
    JsonValue c = JsonValue::Object();
    if (channel.has_content_type()) c.Set("ContentType", Str(channel.content_type()));
    c.Set("TrainingInputMode", Str(EffectiveInputMode(request, channel)));
    const bool sharded = channel.data_source().has_s3_data_source() &&
                         s3.s3_data_distribution_type() == "ShardedByS3Key";
    c.Set("S3DistributionType", Str(sharded ? "ShardedByS3Key" : "FullyReplicated"));
    c.Set("RecordWrapperType",
          Str(channel.has_record_wrapper_type() ? channel.record_wrapper_type() : "None"));
    input_data[channel.channel_name()] = c;
    config.channels.push_back(channel.channel_name());
  }
  std::sort(config.channels.begin(), config.channels.end());
  {
    // The file keeps the request's channel order; the members' order is the
    // service's (ContentType, TrainingInputMode, S3DistributionType,
    // RecordWrapperType).
    JsonValue file = JsonValue::Object();
    for (const v1::Channel& channel : request.input_data_config()) {
      auto it = input_data.find(channel.channel_name());
      if (it != input_data.end()) file.Set(it->first, it->second);
    }
    config.inputdataconfig_json = WriteJson(file);
  }

  // --- The environment the toolkit would see, then what it derives.
  std::map<std::string, std::string>& env = config.env;
  env["PATH"] = in.host_path.empty() ? in.program_dir : absl::StrCat(in.program_dir, ":", in.host_path);
  if (!in.home.empty()) env["HOME"] = in.home;
  env["TMPDIR"] = in.tmp_dir;
  env["TRAINING_JOB_NAME"] = in.job_name;
  env["TRAINING_JOB_ARN"] = in.job_arn;
  env["SAGEMAKER_BASE_DIR"] = in.base_dir;
  const std::string region = RegionOfArn(in.job_arn);
  if (!region.empty()) env["AWS_REGION"] = region;
  for (const auto& [k, v] : request.environment()) env[k] = v;

  // Hyperparameters split as the toolkit splits them.
  std::map<std::string, JsonValue> user_hps;       // hyperparameters
  std::map<std::string, JsonValue> sagemaker_hps;  // sagemaker_* and reserved
  for (const auto& [k, v] : raw_hps) {
    JsonValue decoded = DecodeHyperparameter(v);
    if (SageMakerHyperparameters().count(k) > 0 || absl::StartsWith(k, "sagemaker_")) {
      sagemaker_hps[k] = std::move(decoded);
    } else {
      user_hps[k] = std::move(decoded);
    }
  }
  std::map<std::string, JsonValue> framework_params;
  for (const auto& [k, v] : sagemaker_hps) {
    if (SageMakerHyperparameters().count(k) == 0) framework_params[k] = v;
  }
  auto env_or_null = [&](const char* name) -> JsonValue {
    auto it = env.find(name);
    return it == env.end() ? JsonValue::Null() : Str(it->second);
  };

  const std::string& base = in.base_dir;
  const std::string model_dir = PathJoin(base, "model");
  const std::string input_dir = PathJoin(base, "input");
  const std::string input_config_dir = PathJoin(input_dir, "config");
  const std::string output_dir = PathJoin(base, "output");
  const std::string output_data_dir = PathJoin(output_dir, "data");
  const std::string output_intermediate_dir = PathJoin(output_dir, "intermediate");
  const std::string code_dir = PathJoin(base, "code");

  // module_name / user_entry_point: SAGEMAKER_PROGRAM, else the
  // sagemaker_program hyperparameter (str(None) is "None", as in the toolkit).
  const JsonValue program = env_or_null("SAGEMAKER_PROGRAM");
  const JsonValue* program_hp = FindIn(sagemaker_hps, "sagemaker_program");
  std::string module_name = !program.is_null() ? program.string_value()
                            : program_hp != nullptr ? PyStr(*program_hp)
                                                    : "None";
  const JsonValue user_entry_point = Truthy(&program)         ? program
                                     : program_hp != nullptr ? *program_hp
                                                             : JsonValue::Null();
  if (absl::EndsWith(module_name, ".py")) module_name.resize(module_name.size() - 3);
  const JsonValue* submit_dir = FindIn(sagemaker_hps, "sagemaker_submit_directory");
  const std::string module_dir = submit_dir == nullptr ? code_dir : PyStr(*submit_dir);
  const JsonValue* log_level_hp = FindIn(sagemaker_hps, "sagemaker_container_log_level");
  const JsonValue log_level = log_level_hp == nullptr ? JsonValue::Int(20) : *log_level_hp;
  const JsonValue framework_module = env_or_null("SAGEMAKER_TRAINING_MODULE");
  const JsonValue job_name = env_or_null("TRAINING_JOB_NAME");

  // Instance groups and distribution.
  const std::string& current_group = self.group_name;
  const std::vector<std::string>& current_group_hosts = groups[current_group].second;
  JsonValue distribution_groups = JsonValue::Array();
  if (const JsonValue* d = FindIn(framework_params, "sagemaker_distribution_instance_groups")) {
    distribution_groups = *d;
  } else {
    for (const char* flag : kDistributionFlags) {
      if (Truthy(FindIn(framework_params, flag))) {
        distribution_groups.Push(Str(current_group));
        break;
      }
    }
  }
  auto in_distribution = [&](const std::string& group) {
    if (distribution_groups.is_string()) {
      return absl::StrContains(distribution_groups.string_value(), group);
    }
    for (const JsonValue& g : distribution_groups.elements()) {
      if (g.is_string() && g.string_value() == group) return true;
    }
    return false;
  };
  std::vector<std::string> distribution_hosts;
  for (const std::string& name : group_order) {
    if (in_distribution(name)) {
      const auto& gh = groups[name].second;
      distribution_hosts.insert(distribution_hosts.end(), gh.begin(), gh.end());
    }
  }
  const std::string master = !distribution_hosts.empty() ? distribution_hosts.front() : hosts.front();
  JsonValue mp = JsonValue::Null();
  if (auto it = env.find("SM_HP_MP_PARAMETERS"); it != env.end()) {
    mp = it->second.empty() ? Str("") : JsonValue::Bool(it->second != "{}");
  }

  std::map<std::string, JsonValue> channel_dirs;
  for (const std::string& ch : config.channels) {
    channel_dirs[ch] = Str(PathJoin(PathJoin(input_dir, "data"), ch));
  }
  const JsonValue resource_value = resource;
  const JsonValue input_data_value = ObjectOf(input_data);
  const JsonValue hps_value = ObjectOf(user_hps);
  const JsonValue framework_value = ObjectOf(framework_params);
  const JsonValue groups_value = StrList(group_order);
  const JsonValue groups_dict_value = ObjectOf(instance_groups_dict);
  const JsonValue is_hetero = JsonValue::Bool(group_order.size() > 1);

  std::map<std::string, JsonValue> training_env{
      {"additional_framework_parameters", framework_value},
      {"channel_input_dirs", ObjectOf(channel_dirs)},
      {"current_host", Str(self.host_name)},
      {"current_instance_group", Str(current_group)},
      {"current_instance_group_hosts", StrList(current_group_hosts)},
      {"current_instance_type", Str(self.instance_type)},
      {"distribution_hosts", StrList(distribution_hosts)},
      {"distribution_instance_groups", distribution_groups},
      {"framework_module", framework_module},
      {"hosts", StrList(hosts)},
      {"hyperparameters", hps_value},
      {"input_config_dir", Str(input_config_dir)},
      {"input_data_config", input_data_value},
      {"input_dir", Str(input_dir)},
      {"instance_groups", groups_value},
      {"instance_groups_dict", groups_dict_value},
      {"is_hetero", is_hetero},
      {"is_master", JsonValue::Bool(self.host_name == master)},
      {"is_modelparallel_enabled", mp},
      {"job_name", job_name},
      {"log_level", log_level},
      {"master_hostname", Str(master)},
      {"model_dir", Str(model_dir)},
      {"module_dir", Str(module_dir)},
      {"module_name", Str(module_name)},
      {"network_interface_name", Str(in.network_interface_name)},
      {"num_cpus", JsonValue::Int(in.cpu_count)},
      {"num_gpus", JsonValue::Int(0)},
      {"num_neurons", JsonValue::Int(0)},
      {"output_data_dir", Str(output_data_dir)},
      {"output_dir", Str(output_dir)},
      {"output_intermediate_dir", Str(output_intermediate_dir)},
      {"resource_config", resource_value},
      {"user_entry_point", user_entry_point},
  };

  // SM_USER_ARGS: --key value per user hyperparameter, keys sorted.
  JsonValue user_args = JsonValue::Array();
  for (const auto& [k, v] : user_hps) {
    size_t chars = 0;
    for (size_t i = 0; i < k.size();) {
      NextCodePoint(k, i);
      ++chars;
    }
    user_args.Push(Str(k.empty() ? "" : absl::StrCat(chars > 1 ? "--" : "-", k)));
    if (v.is_object()) {
      std::vector<const JsonValue::Member*> members;
      for (const auto& m : v.members()) members.push_back(&m);
      std::sort(members.begin(), members.end(),
                [](const auto* a, const auto* b) { return a->first < b->first; });
      std::vector<std::string> items;
      for (const auto* m : members) items.push_back(absl::StrCat(m->first, "=", PyStr(m->second)));
      user_args.Push(Str(absl::StrJoin(items, ",")));
    } else {
      user_args.Push(Str(v.is_null() ? "" : PyStr(v)));
    }
  }

  std::map<std::string, JsonValue> sm{
      {"hosts", StrList(hosts)},
      {"network_interface_name", Str(in.network_interface_name)},
      {"hps", hps_value},
      {"user_entry_point", user_entry_point},
      {"framework_params", framework_value},
      {"resource_config", resource_value},
      {"input_data_config", input_data_value},
      {"output_data_dir", Str(output_data_dir)},
      {"channels", StrList(config.channels)},
      {"current_host", Str(self.host_name)},
      {"current_instance_type", Str(self.instance_type)},
      {"current_instance_group", Str(current_group)},
      {"current_instance_group_hosts", StrList(current_group_hosts)},
      {"instance_groups", groups_value},
      {"instance_groups_dict", groups_dict_value},
      {"distribution_instance_groups", distribution_groups},
      {"is_hetero", is_hetero},
      {"module_name", Str(module_name)},
      {"log_level", log_level},
      {"framework_module", framework_module},
      {"input_dir", Str(input_dir)},
      {"input_config_dir", Str(input_config_dir)},
      {"output_dir", Str(output_dir)},
      {"num_cpus", JsonValue::Int(in.cpu_count)},
      {"num_gpus", JsonValue::Int(0)},
      {"num_neurons", JsonValue::Int(0)},
      {"model_dir", Str(model_dir)},
      {"module_dir", Str(module_dir)},
      {"training_env", ObjectOf(training_env)},
      {"user_args", user_args},
      {"output_intermediate_dir", Str(output_intermediate_dir)},
  };
  for (const auto& [name, dir] : channel_dirs) sm[absl::StrCat("channel_", name)] = dir;
  for (const auto& [k, v] : user_hps) sm[absl::StrCat("hp_", k)] = v;
  for (const auto& [k, v] : sm) env[absl::StrCat("SM_", absl::AsciiStrToUpper(k))] = ToEnvValue(v);

  // What the toolkit writes into its own environment before running the user's code.
  env["CURRENT_HOST"] = self.host_name;
  const JsonValue* job_name_hp = FindIn(sagemaker_hps, "sagemaker_job_name");
  env["SAGEMAKER_JOB_NAME"] = job_name_hp == nullptr ? "" : PyStr(*job_name_hp);
  const JsonValue* region_hp = FindIn(sagemaker_hps, "sagemaker_region");
  env["SAGEMAKER_REGION"] = region_hp != nullptr ? PyStr(*region_hp) : region;
  return config;
}

}  // namespace kiln::local::internal
