// ParseScenario / LoadScenario: the scenario file format of
// examples/scenarios/README.md.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kiln/cluster_provider.h"
#include "kiln/json.h"
#include "kiln/plugin/files.h"
#include "kiln/plugin/json_value.h"
#include "kiln/plugin/status_macros.h"
#include "kiln/sim/scenario.h"
#include "kiln/validation.h"

namespace kiln::sim {
namespace {


// The longest keep-alive the engine gives a job (the default of
// WarmPoolOptions::max_keep_alive, the service's 6 hours): a longer Fixed(T)
// or adaptive fallback would silently be this.
constexpr absl::Duration kMaxKeepAlive = absl::Seconds(21600);
// At most this many histogram bins (range / bin_width) for an adaptive
// keep-alive: each cluster shape keeps one int64 per bin.
constexpr int64_t kMaxAdaptiveBins = 10000;

absl::Status Bad(const std::string& path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", std::string(what)));
}

// Paths name members by their keys, which are input (an instance type's
// name, an unknown member): a key that could break the message's line or
// make it long is shown quoted and escaped, scenario."a\nb".
std::string Member(const std::string& path, std::string_view key) {
  return absl::StrCat(path, ".", PathKeyForMessage(key));
}

// Input text (a value, a name) as the messages show it, escaped and cut.
std::string Shown(std::string_view text) { return TextForMessage(text); }

absl::Status CheckMembers(const JsonValue& v, const std::string& path,
                          std::initializer_list<std::string_view> allowed) {
  if (!v.is_object()) return Bad(path, "expected an object");
  for (const auto& [key, value] : v.members()) {
    bool ok = false;
    for (std::string_view a : allowed) ok = ok || key == a;
    if (!ok) {
      std::vector<std::string> names(allowed.begin(), allowed.end());
      return Bad(Member(path, key), absl::StrCat("unknown member (expected one of: ", absl::StrJoin(names, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Number(const JsonValue& v, const std::string& path, double min, double max) {
  auto d = v.AsDouble();
  if (!d.ok() || !std::isfinite(*d) || *d < min || *d > max) {
    return Bad(path, absl::StrCat("expected a number in [", min, ", ", max, "]"));
  }
  return *d;
}

absl::StatusOr<int64_t> Integer(const JsonValue& v, const std::string& path, int64_t min, int64_t max) {
  auto n = v.AsInt64();
  if (!n.ok() || *n < min || *n > max) return Bad(path, absl::StrCat("expected an integer in [", min, ", ", max, "]"));
  return *n;
}

absl::StatusOr<bool> Bool(const JsonValue& v, const std::string& path) {
  if (!v.is_bool()) return Bad(path, "expected true or false");
  return v.bool_value();
}

absl::StatusOr<std::string> String(const JsonValue& v, const std::string& path) {
  if (!v.is_string()) return Bad(path, "expected a string");
  return v.string_value();
}

std::string DaysText(absl::Duration d) { return absl::StrCat(absl::ToInt64Hours(d) / 24, "d"); }

// A duration: a number of seconds, or a string such as "90s", "30m", "2h",
// "1h30m", "7d"; finite, and at most kMaxSimDuration.
absl::StatusOr<absl::Duration> Duration(const JsonValue& v, const std::string& path) {
  absl::Duration d;
  if (v.is_number()) {
    auto s = v.AsDouble();
    if (!s.ok() || !std::isfinite(*s) || *s < 0) return Bad(path, "expected a non-negative number of seconds");
    d = absl::Seconds(*s);
  } else if (!v.is_string()) {
    return Bad(path,
               "expected a duration (seconds, or a string like \"90s\", \"30m\", \"2h\", \"7d\")");
  } else {
    const std::string& text = v.string_value();
    double days = 0;
    if (absl::EndsWith(text, "d") && absl::SimpleAtod(text.substr(0, text.size() - 1), &days) &&
        days >= 0) {
      d = absl::Hours(24) * days;
    } else if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration()) {
      return Bad(path, absl::StrCat("'", Shown(text),
                                    "' is not a duration (e.g. \"90s\", \"30m\", \"2h\", \"7d\")"));
    }
  }
  // (Infinite and huge values, "inf" or 1e300, land here too.)
  if (d > kMaxSimDuration) {
    return Bad(path, absl::StrCat("a duration must be finite and at most ",
                                  DaysText(kMaxSimDuration), " (about 10 years)"));
  }
  return d;
}

// A DurationDist: a duration (fixed), or {"median", "sigma", "max_factor"}.
absl::StatusOr<DurationDist> Dist(const JsonValue& v, const std::string& path, DurationDist d) {
  if (!v.is_object()) {
    KILN_ASSIGN_OR_RETURN(d.median, Duration(v, path));
    d.sigma = 0;
    return d;
  }
  KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"median", "sigma", "max_factor"}));
  if (const JsonValue* m = v.Find("median")) {
    KILN_ASSIGN_OR_RETURN(d.median, Duration(*m, Member(path, "median")));
  }
  if (const JsonValue* s = v.Find("sigma")) {
    KILN_ASSIGN_OR_RETURN(d.sigma, Number(*s, Member(path, "sigma"), 0, 5));
  }
  if (const JsonValue* f = v.Find("max_factor")) {
    KILN_ASSIGN_OR_RETURN(d.max_factor, Number(*f, Member(path, "max_factor"), 1, 1e6));
  }
  if (d.Max() > kMaxSimDuration) {
    return Bad(path, absl::StrCat("median x max_factor (the longest draw) must be at most ",
                                  DaysText(kMaxSimDuration)));
  }
  return d;
}

// A RateDist in MB/s: a number, or {"median", "sigma", "max_factor"}.
absl::StatusOr<RateDist> Rate(const JsonValue& v, const std::string& path, RateDist r) {
  if (!v.is_object()) {
    KILN_ASSIGN_OR_RETURN(r.median_mb_per_s, Number(v, path, 1e-3, 1e9));
    r.sigma = 0;
    return r;
  }
  KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"median", "sigma", "max_factor"}));
  if (const JsonValue* m = v.Find("median")) {
    KILN_ASSIGN_OR_RETURN(r.median_mb_per_s, Number(*m, Member(path, "median"), 1e-3, 1e9));
  }
  if (const JsonValue* s = v.Find("sigma")) {
    KILN_ASSIGN_OR_RETURN(r.sigma, Number(*s, Member(path, "sigma"), 0, 5));
  }
  if (const JsonValue* f = v.Find("max_factor")) {
    KILN_ASSIGN_OR_RETURN(r.max_factor, Number(*f, Member(path, "max_factor"), 1, 1e6));
  }
  return r;
}

// A file the scenario names, or the scenario itself: regular, and at most
// `max_bytes` (`kind` names such a file in the message's rule).
absl::StatusOr<std::string> ReadText(const std::string& path, int64_t max_bytes,
                                     std::string_view kind) {
  absl::StatusOr<std::string> text = ReadUserFile(path, max_bytes, kind);
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat("cannot read '", PathForMessage(path),
                                                           "': ", text.status().message()));
  }
  return text;
}

std::string Resolve(std::string_view base_dir, const std::string& file) {
  if (file.empty() || file[0] == '/' || base_dir.empty()) return file;
  return absl::StrCat(std::string(base_dir), base_dir.back() == '/' ? "" : "/", file);
}

// Instances per instance type a request asks for: its InstanceGroups' counts
// summed per type, or InstanceType x InstanceCount.
std::map<std::string, int64_t> InstancesByType(const v1::CreateTrainingJobRequest& r) {
  std::map<std::string, int64_t> out;
  const auto& rc = r.resource_config();
  if (rc.instance_groups_size() > 0) {
    for (const auto& g : rc.instance_groups()) out[g.instance_type()] += g.instance_count();
  } else {
    out[rc.instance_type()] += rc.instance_count();
  }
  return out;
}

// Why a job of `r` could start under no policy, or "": for one of its types,
// it needs more instances than the type's on-demand capacity and (when the
// job may use spot) more than its spot market ever has.
std::string NeverStarts(const SimModels& models, const v1::CreateTrainingJobRequest& r,
                        bool spot_eligible) {
  for (const auto& [type, count] : InstancesByType(r)) {
    const InstanceTypeModel& t = models.Type(type);
    if (!t.capacity || count <= *t.capacity) continue;
    std::optional<int64_t> spot;  // the most spot instances there ever are (none: no limit)
    if (t.spot.kind == SpotMarket::Kind::kTrace) {
      const std::vector<int32_t>& a = t.spot.trace.available;
      spot = a.empty() ? 0 : *std::max_element(a.begin(), a.end());
    } else if (t.spot.capacity) {
      spot = *t.spot.capacity;
    }
    if (spot_eligible && (!spot || count <= *spot)) continue;
    std::string why = absl::StrCat("needs ", count, " x ", type,
                                   ", more than the type's on-demand capacity (", *t.capacity, ")");
    if (spot_eligible) absl::StrAppend(&why, " and than its spot market ever has (", *spot, ")");
    return absl::StrCat(why, ": it could never start (raise models.instance_types.", type,
                        ".capacity)");
  }
  return "";
}

// A job stage too long to simulate: the member at fault, and why.
struct StageError {
  std::string member;  // "image_bytes" or "data_bytes"; empty: none
  std::string why;
};

// Whether a job of `r` with these byte counts would have a stage longer than
// kMaxSimDuration at the models' slowest rates: its image pull on one of its
// types (image_bytes), a channel's download or, in Pipe mode, its stream over
// all the epochs (data_bytes). Stage times derived from bytes are bounded like
// the durations a scenario gives: past them the virtual clock would overflow.
StageError StageTooLong(const SimModels& models, const v1::CreateTrainingJobRequest& r,
                        int64_t image_bytes, int64_t data_bytes, int32_t epochs) {
  auto too_long = [&](absl::Duration d, std::string member, const std::string& what) {
    if (d <= kMaxSimDuration) return StageError{};
    return StageError{std::move(member), absl::StrCat(what, " takes up to ",
                        d == absl::InfiniteDuration()
                            ? std::string("ever")
                            : absl::StrCat(absl::ToInt64Hours(d) / 24, " days"),
                        " at the models' slowest rate; a stage may take at most ",
                        absl::ToInt64Hours(kMaxSimDuration) / 24, " days")};
  };
  for (const auto& [type, count] : InstancesByType(r)) {
    StageError error = too_long(models.Type(type).image_pull.MaxTime(image_bytes), "image_bytes",
                                absl::StrCat("pulling ", image_bytes, " bytes on ", type));
    if (!error.member.empty()) return error;
  }
  for (const v1::Channel& c : r.input_data_config()) {
    if (c.data_source().has_file_system_data_source()) continue;  // a mount: no bytes moved
    const std::string& mode = EffectiveInputMode(r, c);
    StageError error =
        mode == "Pipe"
            ? too_long(models.data.pipe_rate.MaxTime(data_bytes) * std::max<int64_t>(1, epochs),
                       "data_bytes",
                       absl::StrCat("streaming ", data_bytes, " bytes ", epochs,
                                    " times through channel '", c.channel_name(), "'"))
            : too_long(models.data.Max(mode, data_bytes), "data_bytes",
                       absl::StrCat("downloading ", data_bytes, " bytes to channel '",
                                    c.channel_name(), "' in ", mode, " mode"));
    if (!error.member.empty()) return error;
  }
  return {};
}

class Parser {
 public:
  explicit Parser(std::string_view base_dir) : base_dir_(base_dir) {}

  absl::StatusOr<Scenario> Parse(std::string_view text) {
    auto doc = ParseJsonValue(text);
    if (!doc.ok()) return absl::InvalidArgumentError(absl::StrCat("scenario: ", std::string(doc.status().message())));
    const JsonValue& v = *doc;
    const std::string path = "scenario";
    KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"name", "description", "seed", "horizon", "models", "workloads",
                                                "policies", "baseline", "report"}));
    Scenario s;
    auto models = std::make_shared<SimModels>(DefaultModels());
    if (const JsonValue* n = v.Find("name")) {
      KILN_ASSIGN_OR_RETURN(s.name, String(*n, Member(path, "name")));
    }
    if (const JsonValue* d = v.Find("description")) {
      KILN_ASSIGN_OR_RETURN(s.description, String(*d, Member(path, "description")));
    }
    if (const JsonValue* seed = v.Find("seed")) {
      KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*seed, Member(path, "seed"), 0, INT64_MAX));
      s.seed = static_cast<uint64_t>(n);
    }
    models->seed = s.seed;
    if (const JsonValue* h = v.Find("horizon")) {
      KILN_ASSIGN_OR_RETURN(s.horizon, Duration(*h, Member(path, "horizon")));
      if (s.horizon <= absl::ZeroDuration()) return Bad(Member(path, "horizon"), "must be positive");
    }
    horizon_ = s.horizon;
    if (const JsonValue* m = v.Find("models")) KILN_RETURN_IF_ERROR(ParseModels(*m, Member(path, "models"), *models));
    const JsonValue* workloads = v.Find("workloads");
    if (workloads == nullptr || !workloads->is_array() || workloads->elements().empty()) {
      return Bad(Member(path, "workloads"), "expected a non-empty array of workloads");
    }
    std::set<std::string> names;
    for (size_t i = 0; i < workloads->elements().size(); ++i) {
      const std::string wpath = absl::StrCat(path, ".workloads[", i, "]");
      KILN_ASSIGN_OR_RETURN(WorkloadSpec w, ParseWorkload(workloads->elements()[i], wpath, *models, i));
      if (!names.insert(w.name).second) return Bad(wpath, absl::StrCat("workload name '", w.name, "' is used twice"));
      s.workloads.push_back(std::move(w));
    }
    const JsonValue* policies = v.Find("policies");
    if (policies == nullptr || !policies->is_array() || policies->elements().empty()) {
      return Bad(Member(path, "policies"), "expected a non-empty array of policies");
    }
    std::set<std::string> policy_names;
    for (size_t i = 0; i < policies->elements().size(); ++i) {
      const std::string ppath = absl::StrCat(path, ".policies[", i, "]");
      KILN_ASSIGN_OR_RETURN(std::vector<PolicySpec> expanded, ParsePolicy(policies->elements()[i], ppath));
      for (PolicySpec& p : expanded) {
        if (!policy_names.insert(p.name).second) {
          return Bad(ppath, absl::StrCat("policy name '", Shown(p.name),
                                         "' is used twice (give it a \"name\")"));
        }
        s.policies.push_back(std::move(p));
      }
    }
    if (const JsonValue* b = v.Find("baseline")) {
      KILN_ASSIGN_OR_RETURN(s.baseline, String(*b, Member(path, "baseline")));
      if (!policy_names.contains(s.baseline)) {
        return Bad(Member(path, "baseline"),
                   absl::StrCat("'", Shown(s.baseline), "' names no policy"));
      }
    }
    if (const JsonValue* r = v.Find("report")) {
      const std::string rpath = Member(path, "report");
      KILN_RETURN_IF_ERROR(CheckMembers(*r, rpath, {"slack_sweep"}));
      if (const JsonValue* sweep = r->Find("slack_sweep")) {
        if (!sweep->is_array()) return Bad(Member(rpath, "slack_sweep"), "expected an array of numbers");
        for (size_t i = 0; i < sweep->elements().size(); ++i) {
          KILN_ASSIGN_OR_RETURN(double x, Number(sweep->elements()[i], absl::StrCat(rpath, ".slack_sweep[", i, "]"), 1, 1000));
          s.slack_sweep.push_back(x);
        }
      }
    }
    s.models = std::move(models);
    return s;
  }

 private:
  absl::Status ParseModels(const JsonValue& v, const std::string& path, SimModels& m) {
    KILN_RETURN_IF_ERROR(
        CheckMembers(v, path, {"instance_types", "default_type", "node_failures", "data", "capacity_error"}));
    if (const JsonValue* d = v.Find("default_type")) {
      KILN_RETURN_IF_ERROR(ParseType(*d, Member(path, "default_type"), m.default_type, true));
      // With a price of its own, it covers the types not listed (the
      // built-in default's placeholder price covers none).
      default_priced_ = d->Find("on_demand_per_hour") != nullptr;
    }
    if (const JsonValue* types = v.Find("instance_types")) {
      const std::string tpath = Member(path, "instance_types");
      if (!types->is_object()) return Bad(tpath, "expected an object of instance types");
      for (const auto& [name, t] : types->members()) {
        auto it = m.types.find(name);
        const bool known = it != m.types.end();
        InstanceTypeModel model = known ? it->second : m.default_type;
        KILN_RETURN_IF_ERROR(ParseType(t, Member(tpath, name), model, known || default_priced_));
        m.types[name] = std::move(model);
      }
    }
    if (const JsonValue* f = v.Find("node_failures")) {
      const std::string fpath = Member(path, "node_failures");
      if (f->is_bool()) {
        m.failures.enabled = f->bool_value();
      } else {
        KILN_RETURN_IF_ERROR(CheckMembers(*f, fpath, {"shape", "scale_machine_hours"}));
        if (const JsonValue* x = f->Find("shape")) {
          KILN_ASSIGN_OR_RETURN(m.failures.shape, Number(*x, Member(fpath, "shape"), 0.01, 10));
        }
        if (const JsonValue* x = f->Find("scale_machine_hours")) {
          KILN_ASSIGN_OR_RETURN(m.failures.scale_machine_hours, Number(*x, Member(fpath, "scale_machine_hours"), 1e-3, 1e15));
        }
      }
    }
    if (const JsonValue* d = v.Find("data")) {
      const std::string dpath = Member(path, "data");
      KILN_RETURN_IF_ERROR(CheckMembers(*d, dpath, {"file_setup", "file_rate", "fast_file", "fsx", "pipe", "pipe_rate"}));
      if (const JsonValue* x = d->Find("file_setup")) {
        KILN_ASSIGN_OR_RETURN(m.data.file_setup, Dist(*x, Member(dpath, "file_setup"), m.data.file_setup));
      }
      if (const JsonValue* x = d->Find("file_rate")) {
        KILN_ASSIGN_OR_RETURN(m.data.file_rate, Rate(*x, Member(dpath, "file_rate"), m.data.file_rate));
      }
      if (const JsonValue* x = d->Find("fast_file")) {
        KILN_ASSIGN_OR_RETURN(m.data.fast_file, Dist(*x, Member(dpath, "fast_file"), m.data.fast_file));
      }
      if (const JsonValue* x = d->Find("fsx")) {
        KILN_ASSIGN_OR_RETURN(m.data.fsx, Dist(*x, Member(dpath, "fsx"), m.data.fsx));
      }
      if (const JsonValue* x = d->Find("pipe")) {
        KILN_ASSIGN_OR_RETURN(m.data.pipe, Dist(*x, Member(dpath, "pipe"), m.data.pipe));
      }
      if (const JsonValue* x = d->Find("pipe_rate")) {
        KILN_ASSIGN_OR_RETURN(m.data.pipe_rate, Rate(*x, Member(dpath, "pipe_rate"), m.data.pipe_rate));
      }
    }
    if (const JsonValue* c = v.Find("capacity_error")) {
      KILN_ASSIGN_OR_RETURN(m.capacity_error_latency, Duration(*c, Member(path, "capacity_error")));
    }
    return absl::OkStatus();
  }

  absl::Status ParseType(const JsonValue& v, const std::string& path, InstanceTypeModel& t, bool priced) {
    KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"on_demand_per_hour", "spot_per_hour", "capacity", "provisioning",
                                                "container_start", "image_pull", "spot", "spot_capacity",
                                                "spot_notice"}));
    if (const JsonValue* p = v.Find("on_demand_per_hour")) {
      KILN_ASSIGN_OR_RETURN(t.on_demand_per_hour, Number(*p, Member(path, "on_demand_per_hour"), 0, 1e6));
      if (v.Find("spot_per_hour") == nullptr) t.spot_per_hour = t.on_demand_per_hour * 0.3;
    } else if (!priced) {
      return Bad(path, "on_demand_per_hour is required for an instance type without a default price");
    }
    if (const JsonValue* p = v.Find("spot_per_hour")) {
      KILN_ASSIGN_OR_RETURN(t.spot_per_hour, Number(*p, Member(path, "spot_per_hour"), 0, 1e6));
    }
    if (const JsonValue* c = v.Find("capacity")) {
      KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*c, Member(path, "capacity"), 0, INT32_MAX));
      t.capacity = static_cast<int32_t>(n);
    }
    if (const JsonValue* d = v.Find("provisioning")) {
      KILN_ASSIGN_OR_RETURN(t.provisioning, Dist(*d, Member(path, "provisioning"), t.provisioning));
    }
    if (const JsonValue* d = v.Find("container_start")) {
      KILN_ASSIGN_OR_RETURN(t.container_start, Dist(*d, Member(path, "container_start"), t.container_start));
    }
    if (const JsonValue* r = v.Find("image_pull")) {
      KILN_ASSIGN_OR_RETURN(t.image_pull, Rate(*r, Member(path, "image_pull"), t.image_pull));
    }
    if (const JsonValue* s = v.Find("spot")) KILN_RETURN_IF_ERROR(ParseSpot(*s, Member(path, "spot"), t.spot));
    if (const JsonValue* c = v.Find("spot_capacity")) {
      KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*c, Member(path, "spot_capacity"), 0, INT32_MAX));
      t.spot.capacity = static_cast<int32_t>(n);
    }
    if (const JsonValue* n = v.Find("spot_notice")) {
      KILN_ASSIGN_OR_RETURN(t.spot_notice, Duration(*n, Member(path, "spot_notice")));
    }
    return absl::OkStatus();
  }

  absl::Status ParseSpot(const JsonValue& v, const std::string& path, SpotMarket& s) {
    if (v.is_string() && v.string_value() == "none") {
      s.kind = SpotMarket::Kind::kNone;
      return absl::OkStatus();
    }
    KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"trace", "invert", "poisson_per_instance_hour", "bathtub"}));
    const int kinds = (v.Find("trace") != nullptr) + (v.Find("poisson_per_instance_hour") != nullptr) +
                      (v.Find("bathtub") != nullptr);
    if (kinds != 1) return Bad(path, "give exactly one of trace, poisson_per_instance_hour, bathtub (or \"none\")");
    if (const JsonValue* t = v.Find("trace")) {
      KILN_ASSIGN_OR_RETURN(std::string file, String(*t, Member(path, "trace")));
      bool invert = false;
      if (const JsonValue* i = v.Find("invert")) {
        KILN_ASSIGN_OR_RETURN(invert, Bool(*i, Member(path, "invert")));
      }
      const std::string resolved = Resolve(base_dir_, file);
      auto text = ReadText(resolved, kMaxTraceFileBytes, "a trace file");
      if (!text.ok()) return Bad(Member(path, "trace"), std::string(text.status().message()));
      auto trace = ParseSpotTrace(*text, invert);
      if (!trace.ok()) {
        return Bad(Member(path, "trace"), absl::StrCat(PathForMessage(resolved), ": ",
                                                       std::string(trace.status().message())));
      }
      if (trace->gap <= absl::ZeroDuration() || trace->gap > kMaxSimDuration) {
        return Bad(Member(path, "trace"),
                   absl::StrCat(PathForMessage(resolved),
                                ": metadata.gap_seconds must be positive and at most ",
                                absl::ToInt64Seconds(kMaxSimDuration)));
      }
      s.kind = SpotMarket::Kind::kTrace;
      s.trace = std::move(*trace);
    } else if (const JsonValue* p = v.Find("poisson_per_instance_hour")) {
      KILN_ASSIGN_OR_RETURN(s.preemptions_per_instance_hour, Number(*p, Member(path, "poisson_per_instance_hour"), 0, 1e6));
      s.kind = SpotMarket::Kind::kPoisson;
    } else if (const JsonValue* b = v.Find("bathtub")) {
      const std::string bpath = Member(path, "bathtub");
      s.kind = SpotMarket::Kind::kBathtub;
      if (b->is_bool() && b->bool_value()) return absl::OkStatus();
      KILN_RETURN_IF_ERROR(CheckMembers(*b, bpath, {"a", "tau1", "tau2", "b", "cap"}));
      if (const JsonValue* x = b->Find("a")) {
        KILN_ASSIGN_OR_RETURN(s.bathtub.a, Number(*x, Member(bpath, "a"), 0, 1));
      }
      if (const JsonValue* x = b->Find("tau1")) {
        KILN_ASSIGN_OR_RETURN(s.bathtub.tau1, Duration(*x, Member(bpath, "tau1")));
      }
      if (const JsonValue* x = b->Find("tau2")) {
        KILN_ASSIGN_OR_RETURN(s.bathtub.tau2, Duration(*x, Member(bpath, "tau2")));
      }
      if (const JsonValue* x = b->Find("b")) {
        KILN_ASSIGN_OR_RETURN(s.bathtub.b, Duration(*x, Member(bpath, "b")));
      }
      if (const JsonValue* x = b->Find("cap")) {
        KILN_ASSIGN_OR_RETURN(s.bathtub.cap, Duration(*x, Member(bpath, "cap")));
      }
      if (s.bathtub.tau1 <= absl::ZeroDuration() || s.bathtub.tau2 <= absl::ZeroDuration() ||
          s.bathtub.cap <= absl::ZeroDuration()) {
        return Bad(bpath, "tau1, tau2 and cap must be positive");
      }
    }
    return absl::OkStatus();
  }

  // The first instance type of `r` with no price (not listed under
  // models.instance_types, and no priced models.default_type), or "".
  std::string Unpriced(const SimModels& models, const v1::CreateTrainingJobRequest& r) const {
    if (default_priced_) return "";
    for (const auto& [type, count] : InstancesByType(r)) {
      if (!type.empty() && !models.types.contains(type)) return type;
    }
    return "";
  }

  static std::string NoPrice(const std::string& type) {
    return absl::StrCat("no price for instance type '", Shown(type),
                        "': add it under models.instance_types with on_demand_per_hour, or give "
                        "models.default_type an on_demand_per_hour for the types not listed");
  }

  absl::StatusOr<JobTemplate> ParseJob(const JsonValue& v, const std::string& path, const SimModels& models,
                                       bool spot_default) {
    KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"instance_type", "instance_count", "input_mode", "keep_alive", "work",
                                                "image_bytes", "data_bytes", "epochs", "deadline_slack", "spot_eligible",
                                                "checkpoint_every", "algorithm_error_rate", "retries", "request"}));
    JobTemplate t;
    t.spot_eligible = spot_default;
    std::string type = "ml.m5.xlarge", mode = "File";
    int64_t count = 1;
    absl::Duration keep_alive;
    if (const JsonValue* x = v.Find("instance_type")) {
      KILN_ASSIGN_OR_RETURN(type, String(*x, Member(path, "instance_type")));
    }
    if (const JsonValue* x = v.Find("instance_count")) {
      KILN_ASSIGN_OR_RETURN(count, Integer(*x, Member(path, "instance_count"), 1, 10000));
    }
    if (const JsonValue* x = v.Find("input_mode")) {
      KILN_ASSIGN_OR_RETURN(mode, String(*x, Member(path, "input_mode")));
      if (mode != "File" && mode != "FastFile" && mode != "Pipe" && mode != "FSx") {
        return Bad(Member(path, "input_mode"), "expected File, FastFile, Pipe or FSx");
      }
    }
    if (const JsonValue* x = v.Find("keep_alive")) {
      KILN_ASSIGN_OR_RETURN(keep_alive, Duration(*x, Member(path, "keep_alive")));
      if (keep_alive > absl::Seconds(21600)) return Bad(Member(path, "keep_alive"), "at most 21600 s (6 h)");
    }
    const JsonValue* work = v.Find("work");
    if (work == nullptr) return Bad(path, "work is required (a duration or {\"median\", \"sigma\"})");
    KILN_ASSIGN_OR_RETURN(t.work, Dist(*work, Member(path, "work"), t.work));
    if (t.work.median <= absl::ZeroDuration()) return Bad(Member(path, "work"), "must be positive");
    if (const JsonValue* x = v.Find("image_bytes")) {
      KILN_ASSIGN_OR_RETURN(t.image_bytes, Integer(*x, Member(path, "image_bytes"), 0, INT64_MAX));
    }
    if (const JsonValue* x = v.Find("data_bytes")) {
      KILN_ASSIGN_OR_RETURN(t.data_bytes, Integer(*x, Member(path, "data_bytes"), 0, INT64_MAX));
    }
    if (const JsonValue* x = v.Find("epochs")) {
      KILN_ASSIGN_OR_RETURN(int64_t epochs, Integer(*x, Member(path, "epochs"), 1, 1000000));
      t.epochs = static_cast<int32_t>(epochs);
    }
    if (const JsonValue* x = v.Find("deadline_slack")) {
      KILN_ASSIGN_OR_RETURN(t.deadline_slack, Number(*x, Member(path, "deadline_slack"), 1, 1000));
    }
    if (const JsonValue* x = v.Find("spot_eligible")) {
      KILN_ASSIGN_OR_RETURN(t.spot_eligible, Bool(*x, Member(path, "spot_eligible")));
    }
    if (const JsonValue* x = v.Find("checkpoint_every")) {
      KILN_ASSIGN_OR_RETURN(t.checkpoint_interval, Duration(*x, Member(path, "checkpoint_every")));
    }
    if (const JsonValue* x = v.Find("algorithm_error_rate")) {
      KILN_ASSIGN_OR_RETURN(t.algorithm_error_rate, Number(*x, Member(path, "algorithm_error_rate"), 0, 1));
    }
    if (const JsonValue* x = v.Find("request")) {
      for (const char* k : {"instance_type", "instance_count", "input_mode", "keep_alive"}) {
        if (v.Find(k) != nullptr) return Bad(path, absl::StrCat("give either request or ", k, ", not both"));
      }
      if (!x->is_object()) return Bad(Member(path, "request"), "expected a CreateTrainingJob request object");
      JsonValue named = *x;
      named.Set("TrainingJobName", JsonValue::String("template"));
      absl::Status s = ParseJson(WriteJson(named), t.request);
      if (!s.ok()) return Bad(Member(path, "request"), std::string(s.message()));
    } else {
      t.request = DefaultRequest(type, static_cast<int32_t>(count), mode,
                                 static_cast<int32_t>(absl::ToInt64Seconds(keep_alive)));
    }
    if (const JsonValue* x = v.Find("retries")) {
      KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(path, "retries"), 0, 30));
      if (n > 0) t.request.mutable_retry_strategy()->set_maximum_retry_attempts(static_cast<int32_t>(n));
    }
    const bool from_request = v.Find("request") != nullptr;
    if (std::string unpriced = Unpriced(models, t.request); !unpriced.empty()) {
      return Bad(Member(path, from_request ? "request" : "instance_type"), NoPrice(unpriced));
    }
    // The template must make valid requests (under a valid name).
    v1::CreateTrainingJobRequest probe = t.request;
    probe.set_training_job_name("probe");
    absl::Status valid = ValidateCreateTrainingJobRequest(probe);
    if (!valid.ok()) return Bad(path, absl::StrCat("the job's request is not valid: ", std::string(valid.message())));
    if (std::string never = NeverStarts(models, t.request, t.spot_eligible); !never.empty()) {
      return Bad(Member(path, from_request ? "request" : "instance_count"), never);
    }
    const StageError slow = StageTooLong(models, t.request, t.image_bytes, t.data_bytes, t.epochs);
    if (!slow.member.empty()) return Bad(Member(path, slow.member), slow.why);
    return t;
  }

  absl::StatusOr<WorkloadSpec> ParseWorkload(const JsonValue& v, const std::string& path, const SimModels& models,
                                             size_t index) {
    if (!v.is_object()) return Bad(path, "expected an object");
    const JsonValue* kind_value = v.Find("kind");
    if (kind_value == nullptr) return Bad(path, "kind is required (hpo, nightly, interactive, trace)");
    KILN_ASSIGN_OR_RETURN(std::string kind, String(*kind_value, Member(path, "kind")));
    WorkloadSpec w;
    w.kind = kind;
    w.name = absl::StrCat(kind, index);
    if (const JsonValue* n = v.Find("name")) {
      KILN_ASSIGN_OR_RETURN(w.name, String(*n, Member(path, "name")));
      const bool ok = !w.name.empty() && w.name.size() <= 32 && std::isalnum(static_cast<unsigned char>(w.name.front())) &&
                      std::isalnum(static_cast<unsigned char>(w.name.back())) &&
                      std::all_of(w.name.begin(), w.name.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
                      });
      if (!ok) return Bad(Member(path, "name"), "1 to 32 letters, digits and '-', starting and ending with a letter or digit");
    }
    auto job = [&](bool spot_default) -> absl::StatusOr<JobTemplate> {
      const JsonValue* j = v.Find("job");
      if (j == nullptr) return Bad(path, "job is required");
      return ParseJob(*j, Member(path, "job"), models, spot_default);
    };
    if (kind == "hpo") {
      KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"kind", "name", "job", "trials", "parallelism", "sweeps", "first_start",
                                                  "every", "gap"}));
      HpoSweepOptions o;
      o.name = w.name;
      KILN_ASSIGN_OR_RETURN(o.job, job(false));
      if (const JsonValue* x = v.Find("trials")) {
        KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(path, "trials"), 1, 100000000));
        o.trials = static_cast<int32_t>(n);
      }
      if (const JsonValue* x = v.Find("parallelism")) {
        KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(path, "parallelism"), 1, 1000000));
        o.parallelism = static_cast<int32_t>(n);
      }
      if (const JsonValue* x = v.Find("sweeps")) {
        KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(path, "sweeps"), 1, 10000000));
        o.sweeps = static_cast<int32_t>(n);
      }
      if (const JsonValue* x = v.Find("first_start")) {
        KILN_ASSIGN_OR_RETURN(o.first_start, Duration(*x, Member(path, "first_start")));
      }
      if (const JsonValue* x = v.Find("every")) {
        KILN_ASSIGN_OR_RETURN(o.every, Duration(*x, Member(path, "every")));
      }
      if (const JsonValue* x = v.Find("gap")) {
        KILN_ASSIGN_OR_RETURN(o.gap, Dist(*x, Member(path, "gap"), o.gap));
      }
      w.spot_eligible = o.job.spot_eligible;
      w.make = [o](uint64_t seed) { return NewHpoSweep(o, seed); };
    } else if (kind == "nightly") {
      KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"kind", "name", "job", "cities", "days", "at", "spread"}));
      NightlyBatchOptions o;
      o.name = w.name;
      KILN_ASSIGN_OR_RETURN(o.job, job(true));
      if (const JsonValue* x = v.Find("cities")) {
        KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(path, "cities"), 1, 10000000));
        o.cities = static_cast<int32_t>(n);
      }
      if (const JsonValue* x = v.Find("days")) {
        KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(path, "days"), 1, 100000));
        o.days = static_cast<int32_t>(n);
      }
      if (const JsonValue* x = v.Find("at")) {
        KILN_ASSIGN_OR_RETURN(o.at, Duration(*x, Member(path, "at")));
      }
      if (const JsonValue* x = v.Find("spread")) {
        KILN_ASSIGN_OR_RETURN(o.spread, Duration(*x, Member(path, "spread")));
      }
      w.spot_eligible = o.job.spot_eligible;
      w.make = [o](uint64_t seed) { return NewNightlyBatch(o, seed); };
    } else if (kind == "interactive") {
      KILN_RETURN_IF_ERROR(
          CheckMembers(v, path, {"kind", "name", "job", "users", "jobs_per_user", "start_spread", "think_time"}));
      InteractiveOptions o;
      o.name = w.name;
      KILN_ASSIGN_OR_RETURN(o.job, job(false));
      if (const JsonValue* x = v.Find("users")) {
        KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(path, "users"), 1, 10000000));
        o.users = static_cast<int32_t>(n);
      }
      if (const JsonValue* x = v.Find("jobs_per_user")) {
        KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(path, "jobs_per_user"), 1, 10000000));
        o.jobs_per_user = static_cast<int32_t>(n);
      }
      if (const JsonValue* x = v.Find("start_spread")) {
        KILN_ASSIGN_OR_RETURN(o.start_spread, Duration(*x, Member(path, "start_spread")));
      }
      if (const JsonValue* x = v.Find("think_time")) {
        KILN_ASSIGN_OR_RETURN(o.think_time, Dist(*x, Member(path, "think_time"), o.think_time));
      }
      w.spot_eligible = o.job.spot_eligible;
      w.make = [o](uint64_t seed) { return NewInteractive(o, seed); };
    } else if (kind == "trace") {
      KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"kind", "name", "file"}));
      const JsonValue* f = v.Find("file");
      if (f == nullptr) return Bad(path, "file is required (JSON Lines of jobs)");
      KILN_ASSIGN_OR_RETURN(std::string file, String(*f, Member(path, "file")));
      const std::string resolved = Resolve(base_dir_, file);
      auto text = ReadText(resolved, kMaxTraceFileBytes, "a trace file");
      if (!text.ok()) return Bad(Member(path, "file"), std::string(text.status().message()));
      auto entries = ParseJobTrace(*text);
      if (!entries.ok()) {
        return Bad(Member(path, "file"), absl::StrCat(PathForMessage(resolved), ": ",
                                                      std::string(entries.status().message())));
      }
      // Each request as a template's: valid, priced, able to start.
      for (const TraceEntry& e : *entries) {
        w.spot_eligible = w.spot_eligible || e.job.attributes.spot_eligible;
        // Made only for a message: escaping every entry's name would tax
        // traces of millions of jobs that are fine.
        const auto where = [&] {
          return absl::StrCat(PathForMessage(resolved), ": job trace line ", e.line, ": job '",
                              Shown(e.job.name), "'");
        };
        if (std::string type = Unpriced(models, *e.job.request); !type.empty()) {
          return Bad(Member(path, "file"), absl::StrCat(where(), ": ", NoPrice(type)));
        }
        absl::Status valid = ValidateCreateTrainingJobRequest(*e.job.request);
        if (!valid.ok()) {
          return Bad(Member(path, "file"), absl::StrCat(where(), ": the request is not valid: ",
                                                        std::string(valid.message())));
        }
        const std::string never =
            NeverStarts(models, *e.job.request, e.job.attributes.spot_eligible);
        if (!never.empty()) return Bad(Member(path, "file"), absl::StrCat(where(), ": ", never));
        const SimJobAttributes& a = e.job.attributes;
        const StageError slow =
            StageTooLong(models, *e.job.request, a.image_bytes, a.data_bytes, a.epochs);
        if (!slow.member.empty()) {
          return Bad(Member(path, "file"),
                     absl::StrCat(where(), ": sim.", slow.member, ": ", slow.why));
        }
      }
      // A trace that gives the run nothing is a mistake (seconds read as
      // milliseconds, the wrong file, a horizon too short).
      if (entries->empty()) {
        return Bad(Member(path, "file"), absl::StrCat(PathForMessage(resolved), ": no jobs"));
      }
      if (entries->front().arrival >= horizon_) {
        return Bad(Member(path, "file"),
                   absl::StrCat(PathForMessage(resolved), ": no job arrives before the horizon (",
                                absl::ToInt64Seconds(horizon_), " s); the first arrives at ",
                                absl::ToInt64Seconds(entries->front().arrival), " s"));
      }
      auto shared = std::make_shared<const std::vector<TraceEntry>>(std::move(*entries));
      w.make = [shared](uint64_t) { return NewTraceReplay(*shared); };
    } else {
      return Bad(Member(path, "kind"), absl::StrCat("unknown kind '", Shown(kind),
                                                    "' (hpo, nightly, interactive, trace)"));
    }
    return w;
  }

  // A policy kind without options ("never", "job_requested", "on_demand"),
  // given as {"<kind>": body}: the body may only be empty.
  static absl::Status NoOptions(const JsonValue* body, const std::string& path) {
    if (body == nullptr || (body->is_object() && body->members().empty())) return absl::OkStatus();
    if (body->is_object()) {
      return Bad(Member(path, body->members()[0].first),
                 "unknown member (this policy takes no options)");
    }
    return Bad(path, "this policy takes no options (give it as a string)");
  }

  static std::string MaxKeepAliveText() {
    return absl::StrCat("at most ", absl::ToInt64Seconds(kMaxKeepAlive),
                        " s (6 h), the longest keep-alive the engine gives a job");
  }

  absl::StatusOr<SpotChoice> ParseSpotChoice(const JsonValue& v, const std::string& path) {
    SpotChoice c;
    std::string kind;
    const JsonValue* body = nullptr;
    if (v.is_string()) {
      kind = v.string_value();
    } else if (v.is_object() && v.members().size() == 1) {
      kind = v.members()[0].first;
      body = &v.members()[0].second;
    } else {
      return Bad(path,
                 "expected \"on_demand\", \"spot\", \"greedy\", \"uniform_progress\" or an object "
                 "with one of them");
    }
    if (kind == "on_demand") {
      c.kind = SpotChoice::Kind::kOnDemand;
      KILN_RETURN_IF_ERROR(NoOptions(body, Member(path, kind)));
      return c;
    }
    if (kind == "spot") {
      c.kind = SpotChoice::Kind::kSpot;
    } else if (kind == "greedy") {
      c.kind = SpotChoice::Kind::kGreedy;
    } else if (kind == "uniform_progress") {
      c.kind = SpotChoice::Kind::kUniformProgress;
    } else {
      return Bad(path, absl::StrCat("unknown spot policy '", Shown(kind),
                                    "' (on_demand, spot, greedy, uniform_progress)"));
    }
    if (body == nullptr) return c;
    const std::string bpath = Member(path, kind);
    KILN_RETURN_IF_ERROR(CheckMembers(
        *body, bpath,
        {"checkpoint_every", "hysteresis_factor", "safety_factor", "tick", "changeover"}));
    if (const JsonValue* x = body->Find("checkpoint_every")) {
      KILN_ASSIGN_OR_RETURN(c.checkpoint_interval, Duration(*x, Member(bpath, "checkpoint_every")));
      if (c.checkpoint_interval <= absl::ZeroDuration())
        return Bad(Member(bpath, "checkpoint_every"), "must be positive");
    }
    const bool deadline_rules = c.kind != SpotChoice::Kind::kSpot;
    auto factor = [&](std::string_view name, double& out) -> absl::Status {
      const JsonValue* x = body->Find(name);
      if (x == nullptr) return absl::OkStatus();
      const std::string fpath = Member(bpath, name);
      if (!deadline_rules) return Bad(fpath, "only for greedy and uniform_progress");
      if (!x->is_number()) return Bad(fpath, "expected a number");
      const absl::StatusOr<double> n = x->AsDouble();
      if (!n.ok() || !(*n >= 0 && *n <= 100)) return Bad(fpath, "must be a number in [0, 100]");
      out = *n;
      return absl::OkStatus();
    };
    if (c.kind == SpotChoice::Kind::kGreedy && body->Find("hysteresis_factor") != nullptr) {
      return Bad(Member(bpath, "hysteresis_factor"), "only for uniform_progress");
    }
    KILN_RETURN_IF_ERROR(factor("hysteresis_factor", c.rules.hysteresis_factor));
    KILN_RETURN_IF_ERROR(factor("safety_factor", c.rules.safety_factor));
    if (const JsonValue* x = body->Find("tick")) {
      if (!deadline_rules)
        return Bad(Member(bpath, "tick"), "only for greedy and uniform_progress");
      KILN_ASSIGN_OR_RETURN(c.rules.tick, Duration(*x, Member(bpath, "tick")));
      if (c.rules.tick < absl::Seconds(1))
        return Bad(Member(bpath, "tick"), "must be at least 1 s");
    }
    if (const JsonValue* x = body->Find("changeover")) {
      if (!deadline_rules)
        return Bad(Member(bpath, "changeover"), "only for greedy and uniform_progress");
      KILN_ASSIGN_OR_RETURN(c.rules.changeover, Duration(*x, Member(bpath, "changeover")));
    }
    return c;
  }

  // One policy entry; a Fixed(T) sweep expands to one policy per T.
  absl::StatusOr<std::vector<PolicySpec>> ParsePolicy(const JsonValue& v, const std::string& path) {
    KILN_RETURN_IF_ERROR(CheckMembers(v, path, {"name", "keep_alive", "spot"}));
    PolicySpec base;
    if (const JsonValue* s = v.Find("spot")) {
      KILN_ASSIGN_OR_RETURN(base.spot, ParseSpotChoice(*s, Member(path, "spot")));
    }
    std::vector<KeepAliveChoice> keep_alives(1);
    if (const JsonValue* k = v.Find("keep_alive")) {
      const std::string kpath = Member(path, "keep_alive");
      std::string kind;
      const JsonValue* body = nullptr;
      if (k->is_string()) {
        kind = k->string_value();
      } else if (k->is_object() && k->members().size() == 1) {
        kind = k->members()[0].first;
        body = &k->members()[0].second;
      } else {
        return Bad(kpath, "expected \"never\", \"job_requested\", \"adaptive\", {\"fixed\": T or [T...]} or "
                          "{\"adaptive\": {...}}");
      }
      KeepAliveChoice& c = keep_alives[0];
      if (kind == "never") {
        c.kind = KeepAliveChoice::Kind::kNever;
        KILN_RETURN_IF_ERROR(NoOptions(body, Member(kpath, kind)));
      } else if (kind == "job_requested") {
        c.kind = KeepAliveChoice::Kind::kJobRequested;
        KILN_RETURN_IF_ERROR(NoOptions(body, Member(kpath, kind)));
      } else if (kind == "fixed") {
        if (body == nullptr) return Bad(kpath, "fixed needs a duration or a list: {\"fixed\": \"10m\"}");
        c.kind = KeepAliveChoice::Kind::kFixed;
        std::vector<const JsonValue*> values;
        if (body->is_array()) {
          for (const JsonValue& e : body->elements()) values.push_back(&e);
        } else {
          values.push_back(body);
        }
        if (values.empty()) return Bad(Member(kpath, "fixed"), "expected at least one duration");
        keep_alives.assign(values.size(), c);
        for (size_t i = 0; i < values.size(); ++i) {
          KILN_ASSIGN_OR_RETURN(keep_alives[i].fixed, Duration(*values[i], absl::StrCat(kpath, ".fixed[", i, "]")));
          if (keep_alives[i].fixed <= absl::ZeroDuration()) {
            return Bad(absl::StrCat(kpath, ".fixed[", i, "]"), "must be positive (use \"never\" for none)");
          }
          if (keep_alives[i].fixed > kMaxKeepAlive) {
            return Bad(absl::StrCat(kpath, ".fixed[", i, "]"), MaxKeepAliveText());
          }
        }
      } else if (kind == "adaptive") {
        c.kind = KeepAliveChoice::Kind::kAdaptive;
        if (body != nullptr) {
          const std::string apath = Member(kpath, "adaptive");
          KILN_RETURN_IF_ERROR(CheckMembers(*body, apath,
                                            {"percentile", "margin", "bin_width", "range",
                                             "min_samples", "fallback", "review_every"}));
          AdaptiveHistogramOptions& a = c.adaptive;
          if (const JsonValue* x = body->Find("percentile")) {
            KILN_ASSIGN_OR_RETURN(a.percentile, Number(*x, Member(apath, "percentile"), 0.01, 1));
          }
          if (const JsonValue* x = body->Find("margin")) {
            KILN_ASSIGN_OR_RETURN(a.margin, Number(*x, Member(apath, "margin"), 0, 10));
          }
          if (const JsonValue* x = body->Find("bin_width")) {
            KILN_ASSIGN_OR_RETURN(a.bin_width, Duration(*x, Member(apath, "bin_width")));
          }
          if (const JsonValue* x = body->Find("range")) {
            KILN_ASSIGN_OR_RETURN(a.range, Duration(*x, Member(apath, "range")));
          }
          if (const JsonValue* x = body->Find("fallback")) {
            KILN_ASSIGN_OR_RETURN(a.fallback, Duration(*x, Member(apath, "fallback")));
          }
          if (const JsonValue* x = body->Find("review_every")) {
            const std::string rpath = Member(apath, "review_every");
            KILN_ASSIGN_OR_RETURN(a.review_every, Duration(*x, rpath));
            // (Each review is an event per waiting pool: a tiny period would
            // swamp the run for no benefit.)
            if (a.review_every > absl::ZeroDuration() && a.review_every < absl::Seconds(1)) {
              return Bad(rpath, "must be 0 (no reviews) or at least 1 s");
            }
          }
          if (const JsonValue* x = body->Find("min_samples")) {
            KILN_ASSIGN_OR_RETURN(int64_t n, Integer(*x, Member(apath, "min_samples"), 0, 1000000));
            a.min_samples = static_cast<int>(n);
          }
          if (a.bin_width <= absl::ZeroDuration() || a.range < a.bin_width) {
            return Bad(apath, "bin_width must be positive and range at least bin_width");
          }
          if (a.range / a.bin_width > kMaxAdaptiveBins) {
            return Bad(apath, absl::StrCat("range / bin_width is ", a.range / a.bin_width,
                                           " histogram bins; at most ", kMaxAdaptiveBins,
                                           " (widen bin_width or shorten range)"));
          }
          if (a.fallback > kMaxKeepAlive) return Bad(Member(apath, "fallback"), MaxKeepAliveText());
        }
      } else {
        return Bad(kpath, absl::StrCat("unknown keep-alive policy '", Shown(kind),
                                       "' (never, job_requested, fixed, adaptive)"));
      }
    }
    std::string name;
    if (const JsonValue* n = v.Find("name")) {
      KILN_ASSIGN_OR_RETURN(name, String(*n, Member(path, "name")));
    }
    std::vector<PolicySpec> out;
    for (const KeepAliveChoice& k : keep_alives) {
      PolicySpec p = base;
      p.keep_alive = k;
      // Named after what the entry sets: its keep-alive, its spot policy, or both.
      const bool has_keep_alive = v.Find("keep_alive") != nullptr, has_spot = v.Find("spot") != nullptr;
      if (!name.empty()) {
        p.name = keep_alives.size() > 1 ? absl::StrCat(name, " ", k.Name()) : name;
      } else if (has_keep_alive && has_spot) {
        p.name = absl::StrCat(k.Name(), " + ", p.spot.Name());
      } else if (has_spot) {
        p.name = p.spot.Name();
      } else {
        p.name = k.Name();
      }
      out.push_back(std::move(p));
    }
    return out;
  }

  std::string base_dir_;
  absl::Duration horizon_;       // the scenario's
  bool default_priced_ = false;  // models.default_type has a price: unlisted types are priced
};

}  // namespace

absl::StatusOr<Scenario> ParseScenario(std::string_view json, std::string_view base_dir) {
  return Parser(base_dir).Parse(json);
}

absl::StatusOr<Scenario> LoadScenario(const std::string& path) {
  KILN_ASSIGN_OR_RETURN(std::string text,
                        ReadText(path, kMaxScenarioFileBytes, "a scenario file"));
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "."
                          : slash == 0               ? "/"
                                                     : path.substr(0, slash);
  auto scenario = ParseScenario(text, dir);
  if (!scenario.ok()) {
    return absl::Status(scenario.status().code(),
                        absl::StrCat(PathForMessage(path), ": ", scenario.status().message()));
  }
  return scenario;
}

}  // namespace kiln::sim
