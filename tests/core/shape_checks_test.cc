// The generated shape checks (lib/core/schema/shape_checks.cc) against the
// reflection walk they replaced (reference_validator.h, reading the model's
// JSON): the same errors, in the same order, on thousands of random and
// randomly mutated messages of every kiln.v1 type; and the pieces they stand
// on (patterns decided without PCRE2, enumeration tables, shape constants)
// against the model as data.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/internal/regex.h"
#include "core/internal/shapes.h"
#include "core/reference_validator.h"
#include "core/test_rng.h"
#include "google/protobuf/dynamic_message.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/timestamp.pb.h"
#include "gtest/gtest.h"
#include "kiln/json.h"
#include "kiln/validation.h"

namespace kiln {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using test::RefMember;
using test::RefShape;

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

const test::ReferenceModel& Model() {
  static const test::ReferenceModel* model = [] {
    std::string error;
    auto* m = new test::ReferenceModel(ReadFile(KILN_SCHEMA_JSON), &error);
    EXPECT_EQ(error, "") << KILN_SCHEMA_JSON;
    return m;
  }();
  return *model;
}

using ::kiln::testing::Rng;

// Strings that probe every rule: URIs (S3, https, local), ARNs, names with
// and without the characters patterns reject, line breaks, NUL, Unicode
// (including the line and paragraph separators), and malformed UTF-8
// (overlong, surrogate, above U+10FFFF, truncated, stray bytes).
const std::vector<std::string>& Probes() {
  static const auto* probes = new std::vector<std::string>{
      "", "a", "A-1", "job-1", "a_b", "job-", "a--b", "tr ain", "bad*key", "1BAD", "_ok",
      "s3://bucket/key", "s3://bucket", "https://bucket/p", "bucket/out", "file:///tmp/x",
      "file://", "file://\n", "s3://b/\n", "arn:aws:iam::123456789012:role/R",
      "arn:aws:iam::1:role", "arn:aws:sagemaker:us-east-1:123456789012:training-job/j",
      "arn:aws:lambda:us-east-1:123456789012:function:auth", "my-algo", "my-algo-",
      "ml.m5.xlarge", "ml.p4d.24xlarge", "ml.m5.xlarg", "File", "Pipe", "FastFile", "file",
      "S3Prefix", "ManifestFile", "Gzip", "None", "GZIP", "sg-1", "subnet-1", "subnet_1",
      "fs-0123456789abcdef", "fs-01", "x", "\n", "a\nb", "a\rb", "\r\n", "\t", "\v\f",
      std::string("x\0y", 3), std::string("\0", 1), "\xc3\xa9", "\xc3\x89quipe",
      "Z\xc3\xbcrich 1", "\xe2\x80\xa8", "\xe2\x80\xa9", "\xc2\x85", "\xf0\x9f\x98\x80",
      "\xff", "a\xff", "\xc0\x80", "\xc1\xbf", "\xe0\x80\x80", "\xed\xa0\x80", "\xed\x9f\xbf",
      "\xf0\x80\x80\x80", "\xf4\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xc3",
      "\xe2\x80", "\xf0\x9f\x98", "\x80", "a\xbf", "\xf8\x88\x80\x80\x80", "0.1", "-1",
      "Train_error=(.*?);", "loss=([0-9.]+"};
  return *probes;
}

// Valid values seen in the seed requests, by shape name.
using Pool = std::map<std::string, std::vector<std::string>>;

class Generator {
 public:
  Generator(uint64_t seed, const Pool& pool) : rng_(seed), pool_(pool) {}

  Rng& rng() { return rng_; }

  std::string String(const RefShape& shape) {
    switch (rng_.Below(10)) {
      case 0:
      case 1:
      case 2: {
        auto it = pool_.find(shape.name);
        if (it != pool_.end()) return rng_.Pick(it->second);
        if (!shape.enum_values.empty()) return rng_.Pick(shape.enum_values);
        return rng_.Pick(Probes());
      }
      case 3:
        if (!shape.enum_values.empty()) {
          std::string v = rng_.Pick(shape.enum_values);
          if (rng_.Percent(50)) return v;
          if (!v.empty() && rng_.Percent(50)) {
            v[0] = static_cast<char>(v[0] ^ 0x20);  // case flipped
          } else {
            v += rng_.Percent(50) ? "x" : " ";
          }
          return v;
        }
        return rng_.Pick(Probes());
      case 4: {  // on and around the length limits
        std::vector<int64_t> lengths = {0, 1, 2};
        if (shape.min) lengths.insert(lengths.end(), {*shape.min - 1, *shape.min});
        if (shape.max) lengths.insert(lengths.end(), {*shape.max, *shape.max + 1});
        int64_t length = std::clamp<int64_t>(rng_.Pick(lengths), 0, 9000);
        static const std::vector<std::string> kUnits = {"a", "1", "-", "\xc3\xa9", " ", "Z"};
        std::string out;
        if (rng_.Percent(25) && length >= 2) {  // surrogate pairs: two units each
          for (int64_t i = 0; i + 2 <= length; i += 2) out += "\xf0\x9f\x98\x80";
          if (length % 2) out += "a";
          return out;
        }
        const std::string& unit = rng_.Pick(kUnits);
        for (int64_t i = 0; i < length; ++i) out += unit;
        return out;
      }
      case 5:
      case 6:
        return rng_.Pick(Probes());
      default: {  // random pieces
        static const std::vector<std::string> kPieces = {
            "a", "Z", "0", "9", "-", "_", ".", "/", ":", "=", "+", "@", " ", "*", "\n", "\r",
            "\xc3\xa9", "\xe2\x80\xa8", "\xf0\x9f\x98\x80", "\xff", "\xed\xa0\x80", "\xc0\xaf",
            "s3://", "file://", "arn:aws:", std::string("\0", 1)};
        std::string out;
        const int n = rng_.Below(12);
        for (int i = 0; i < n; ++i) out += rng_.Pick(kPieces);
        return out;
      }
    }
  }

  int64_t Number(const RefShape& shape, bool is_int32) {
    std::vector<int64_t> values = {0, 1, -1, rng_.Below(1000000)};
    if (shape.min) values.insert(values.end(), {*shape.min - 1, *shape.min, *shape.min + 1});
    if (shape.max) values.insert(values.end(), {*shape.max - 1, *shape.max, *shape.max + 1});
    if (is_int32) {
      values.insert(values.end(),
                    {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()});
    } else {
      values.insert(values.end(),
                    {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                     int64_t{1} << 40});
    }
    return rng_.Pick(values);
  }

  // Sets the members of `m` at random (required ones mostly), `depth` levels
  // below the top.
  void Fill(Message& m, int depth) {
    const RefShape* shape = Model().Find(m.GetDescriptor()->name());
    if (shape == nullptr) return;
    const Descriptor* d = m.GetDescriptor();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      const RefMember* member = Model().MemberOf(*shape, f);
      if (member == nullptr) continue;
      int chance = member->required ? 85 : 35;
      if (depth >= 3) chance = member->required ? 60 : 10;
      if (rng_.Percent(chance)) Set(m, f, *member->shape, depth);
    }
  }

  // Gives the field a random value (adds elements to a list or map).
  void Set(Message& m, const FieldDescriptor* f, const RefShape& shape, int depth) {
    const Reflection* r = m.GetReflection();
    if (f->is_map()) {
      std::set<std::string> keys;  // distinct, so the map and its entries agree
      for (int i = 0; i < m.GetReflection()->FieldSize(m, f); ++i) {
        const Message& e = r->GetRepeatedMessage(m, f, i);
        keys.insert(e.GetReflection()->GetString(e, f->message_type()->map_key()));
      }
      const int n = Size(shape, 120);
      for (int i = 0; i < n; ++i) {
        // (Plain distinct keys when the map is to reach its size limit.)
        std::string key = n > 12 && rng_.Percent(90) ? absl::StrCat("k", i) : String(*shape.key);
        if (!keys.insert(key).second) continue;
        Message* e = r->AddMessage(&m, f);
        e->GetReflection()->SetString(e, f->message_type()->map_key(), key);
        e->GetReflection()->SetString(e, f->message_type()->map_value(), String(*shape.value));
      }
      return;
    }
    if (f->is_repeated()) {
      const bool big_ok = f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || depth < 2;
      const int n = Size(shape, big_ok ? 120 : 3);
      for (int i = 0; i < n; ++i) {
        switch (f->cpp_type()) {
          case FieldDescriptor::CPPTYPE_MESSAGE: {
            Message* e = r->AddMessage(&m, f);
            // Long lists get sparse elements, so a message stays small.
            if (n <= 3 || rng_.Percent(10)) Fill(*e, depth + 1);
            break;
          }
          case FieldDescriptor::CPPTYPE_STRING:
            r->AddString(&m, f, String(*shape.element));
            break;
          case FieldDescriptor::CPPTYPE_INT32:
            r->AddInt32(&m, f, static_cast<int32_t>(Number(*shape.element, true)));
            break;
          case FieldDescriptor::CPPTYPE_INT64:
            r->AddInt64(&m, f, Number(*shape.element, false));
            break;
          case FieldDescriptor::CPPTYPE_BOOL:
            r->AddBool(&m, f, rng_.Percent(50));
            break;
          case FieldDescriptor::CPPTYPE_DOUBLE:
            r->AddDouble(&m, f, rng_.Below(100) / 7.0);
            break;
          default:
            break;
        }
      }
      return;
    }
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE: {
        Message* sub = r->MutableMessage(&m, f);
        if (auto* ts = dynamic_cast<google::protobuf::Timestamp*>(sub)) {
          ts->set_seconds(rng_.Below(2000000000));
        } else if (rng_.Percent(90)) {
          Fill(*sub, depth + 1);
        }
        break;
      }
      case FieldDescriptor::CPPTYPE_STRING:
        r->SetString(&m, f, String(shape));
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        r->SetInt32(&m, f, static_cast<int32_t>(std::clamp<int64_t>(
                               Number(shape, true), std::numeric_limits<int32_t>::min(),
                               std::numeric_limits<int32_t>::max())));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        r->SetInt64(&m, f, Number(shape, false));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        r->SetBool(&m, f, rng_.Percent(50));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        r->SetDouble(&m, f, rng_.Below(1000) / 3.0);
        break;
      default:
        break;
    }
  }

  // One random change somewhere in `m`: a member cleared, set to a random
  // value, or given more elements.
  void Mutate(Message& m) {
    std::vector<std::pair<Message*, const FieldDescriptor*>> spots;
    Collect(m, spots);
    if (spots.empty()) return;
    auto [target, f] = spots[rng_.Below(static_cast<int>(spots.size()))];
    const RefShape* shape = Model().Find(target->GetDescriptor()->name());
    const RefMember* member = Model().MemberOf(*shape, f);
    const Reflection* r = target->GetReflection();
    const bool present = f->is_repeated() ? r->FieldSize(*target, f) > 0 : r->HasField(*target, f);
    if (present && rng_.Percent(30)) {
      r->ClearField(target, f);
      return;
    }
    if (!f->is_repeated()) r->ClearField(target, f);
    Set(*target, f, *member->shape, 1);
  }

 private:
  int Size(const RefShape& shape, int cap) {
    std::vector<int64_t> sizes = {1, 1, 1, 2, 2, 3};
    if (shape.max && rng_.Percent(15)) sizes = {*shape.max, *shape.max + 1};
    if (shape.min && rng_.Percent(10)) sizes = {*shape.min - 1, *shape.min};
    return static_cast<int>(std::clamp<int64_t>(rng_.Pick(sizes), 0, cap));
  }

  void Collect(Message& m, std::vector<std::pair<Message*, const FieldDescriptor*>>& spots) {
    const RefShape* shape = Model().Find(m.GetDescriptor()->name());
    if (shape == nullptr) return;
    const Descriptor* d = m.GetDescriptor();
    const Reflection* r = m.GetReflection();
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      if (Model().MemberOf(*shape, f) == nullptr) continue;
      spots.emplace_back(&m, f);
      if (f->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE || f->is_map()) continue;
      if (f->is_repeated()) {
        for (int k = 0; k < r->FieldSize(m, f); ++k) {
          Collect(*r->MutableRepeatedMessage(&m, f, k), spots);
        }
      } else if (r->HasField(m, f)) {
        Collect(*r->MutableMessage(&m, f), spots);
      }
    }
  }

  Rng rng_;
  const Pool& pool_;
};

// The valid requests the mutations start from: the validation tests' base
// request, the benchmark's, and the request corpus.
std::vector<v1::CreateTrainingJobRequest> SeedRequests() {
  std::vector<v1::CreateTrainingJobRequest> seeds;
  for (const char* text : {
           R"pb(
             training_job_name: "hpo-17"
             role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
             algorithm_specification {
               training_image: "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:latest"
               training_input_mode: "File"
             }
             output_data_config { s3_output_path: "s3://bucket/output" }
             resource_config { instance_type: "ml.m5.xlarge" instance_count: 1 volume_size_in_gb: 30 }
             stopping_condition { max_runtime_in_seconds: 3600 }
             input_data_config {
               channel_name: "train"
               data_source { s3_data_source { s3_data_type: "S3Prefix" s3_uri: "s3://bucket/train/" } }
             }
           )pb",
           R"pb(
             training_job_name: "job-1"
             role_arn: "arn:aws:iam::123456789012:role/SageMakerRole"
             hyper_parameters { key: "lr" value: "0.1" }
             algorithm_specification { training_image: "train:latest" training_input_mode: "File" }
             input_data_config {
               channel_name: "train"
               data_source { s3_data_source { s3_data_type: "S3Prefix" s3_uri: "s3://bucket/train/" } }
             }
             output_data_config { s3_output_path: "s3://bucket/out" }
             resource_config { instance_type: "ml.m5.xlarge" instance_count: 1 volume_size_in_gb: 30 }
             stopping_condition { max_runtime_in_seconds: 3600 }
           )pb"}) {
    v1::CreateTrainingJobRequest r;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &r));
    seeds.push_back(r);
  }
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(KILN_CORPUS_DIR)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    v1::CreateTrainingJobRequest r;
    EXPECT_TRUE(ParseJson(ReadFile(path), r).ok()) << path;
    seeds.push_back(r);
  }
  return seeds;
}

// Every string value in `m`, by the name of its shape.
void CollectPool(const Message& m, Pool& pool) {
  const RefShape* shape = Model().Find(m.GetDescriptor()->name());
  if (shape == nullptr) return;
  const Descriptor* d = m.GetDescriptor();
  const Reflection* r = m.GetReflection();
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    const RefMember* member = Model().MemberOf(*shape, f);
    if (member == nullptr || f->is_map()) continue;
    if (f->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      if (f->is_repeated()) {
        for (int k = 0; k < r->FieldSize(m, f); ++k) {
          pool[member->shape->element->name].push_back(r->GetRepeatedString(m, f, k));
        }
      } else if (r->HasField(m, f)) {
        pool[member->shape->name].push_back(r->GetString(m, f));
      }
    } else if (f->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (f->is_repeated()) {
        for (int k = 0; k < r->FieldSize(m, f); ++k) CollectPool(r->GetRepeatedMessage(m, f, k), pool);
      } else if (r->HasField(m, f)) {
        CollectPool(r->GetMessage(m, f), pool);
      }
    }
  }
}

std::string Render(const std::vector<ValidationError>& errors) {
  std::string out;
  for (const auto& e : errors) absl::StrAppend(&out, "  [", e.path, "] ", e.message, "\n");
  return out.empty() ? "  (none)\n" : out;
}

// Compares the generated checks with the reference on `m`, both ways of
// treating local URIs; records which kinds of error were seen.
class Comparison {
 public:
  void Check(const Message& m) {
    for (bool local : {true, false}) {
      ValidationOptions options;
      options.allow_local_uris = local;
      const std::vector<ValidationError> got = CheckShapeConstraints(m, options);
      std::vector<ValidationError> want = reference_.Check(m, options);
      // The checks keep the first kMaxReportedViolations.
      if (want.size() > static_cast<size_t>(kMaxReportedViolations)) {
        want.resize(kMaxReportedViolations);
      }
      ++checked_;
      if (got.empty()) ++valid_;
      bool same = got.size() == want.size();
      for (size_t i = 0; same && i < got.size(); ++i) {
        same = got[i].path == want[i].path && got[i].message == want[i].message;
      }
      if (!same && ++mismatches_ <= 3) {
        std::string text = m.ShortDebugString();
        if (text.size() > 4000) text = text.substr(0, 4000) + "...";
        ADD_FAILURE() << m.GetDescriptor()->name() << " (allow_local_uris=" << local
                      << "): " << text << "\ngenerated:\n"
                      << Render(got) << "reference:\n"
                      << Render(want);
      }
      for (const auto& e : want) {
        for (const char* kind : kKinds) {
          if (e.message.find(kind) != std::string::npos) ++seen_[kind];
        }
      }
    }
  }

  int checked() const { return checked_; }
  int valid() const { return valid_; }
  int mismatches() const { return mismatches_; }
  const std::map<std::string, int>& seen() const { return seen_; }

  static constexpr const char* kKinds[] = {
      "Member must not be null",
      "Member must have length less than or equal to",
      "Member must have length greater than or equal to",
      "Member must satisfy regular expression pattern",
      " or ^file://.+",
      "Member must satisfy enum value set",
      "Member must have value less than or equal to",
      "Member must have value greater than or equal to",
      "Map keys must satisfy constraint",
      "Value '[...]'",
      " entries}'",
      ".member' failed",
      "...'",
  };

 private:
  test::ReferenceValidator reference_{Model()};
  int checked_ = 0;
  int valid_ = 0;
  int mismatches_ = 0;
  std::map<std::string, int> seen_;
};

void ExpectEveryKindSeen(const Comparison& c) {
  for (const char* kind : Comparison::kKinds) {
    auto it = c.seen().find(kind);
    EXPECT_TRUE(it != c.seen().end() && it->second > 0) << "no error with: " << kind;
  }
}

TEST(ShapeChecksTest, MutatedRequestsGiveTheReferenceErrors) {
  const std::vector<v1::CreateTrainingJobRequest> seeds = SeedRequests();
  ASSERT_GE(seeds.size(), 7u);
  Pool pool;
  for (const auto& s : seeds) CollectPool(s, pool);
  Generator gen(20240611, pool);
  for (const auto& s : seeds) EXPECT_EQ(Render(CheckShapeConstraints(s)), Render({}));
  Comparison comparison;
  constexpr int kRequests = 5000;
  for (int i = 0; i < kRequests; ++i) {
    v1::CreateTrainingJobRequest r = seeds[i % seeds.size()];
    const int mutations = 1 + gen.rng().Below(i % 5 == 0 ? 8 : 3);
    for (int k = 0; k < mutations; ++k) gen.Mutate(r);
    comparison.Check(r);
  }
  EXPECT_EQ(comparison.mismatches(), 0);
  // The mutations reach every kind of violation, and leave some requests valid.
  ExpectEveryKindSeen(comparison);
  EXPECT_GT(comparison.valid(), comparison.checked() / 50);
  EXPECT_LT(comparison.valid(), comparison.checked() / 2);
}

TEST(ShapeChecksTest, RandomMessagesOfEveryTypeGiveTheReferenceErrors) {
  Pool pool;
  for (const auto& s : SeedRequests()) CollectPool(s, pool);
  Generator gen(7, pool);
  Comparison comparison;
  const google::protobuf::FileDescriptor* file = v1::CreateTrainingJobRequest::descriptor()->file();
  ASSERT_GT(file->message_type_count(), 50);
  auto* factory = google::protobuf::MessageFactory::generated_factory();
  constexpr int kPerType = 60;
  for (int t = 0; t < file->message_type_count(); ++t) {
    const Descriptor* d = file->message_type(t);
    for (int i = 0; i < kPerType; ++i) {
      std::unique_ptr<Message> m(factory->GetPrototype(d)->New());
      gen.Fill(*m, 0);
      comparison.Check(*m);
      if (i % 4 == 0) {  // an empty message: only its required members matter
        m->Clear();
        comparison.Check(*m);
      }
    }
  }
  EXPECT_EQ(comparison.mismatches(), 0);
  ExpectEveryKindSeen(comparison);
}

TEST(ShapeChecksTest, DynamicMessagesAreCheckedLikeGeneratedOnes) {
  v1::CreateTrainingJobRequest r = SeedRequests()[0];
  r.set_training_job_name("a_b");
  r.clear_role_arn();
  (*r.mutable_environment())["1BAD"] = std::string("x");
  google::protobuf::DynamicMessageFactory factory;
  std::unique_ptr<Message> dynamic(factory.GetPrototype(r.GetDescriptor())->New());
  dynamic->CopyFrom(r);
  ASSERT_EQ(dynamic_cast<v1::CreateTrainingJobRequest*>(dynamic.get()), nullptr);
  const std::vector<ValidationError> want = CheckShapeConstraints(r);
  ASSERT_EQ(want.size(), 3u);
  EXPECT_EQ(Render(CheckShapeConstraints(*dynamic)), Render(want));
}

TEST(ShapeChecksTest, MessagesOutsideTheModelHaveNoConstraints) {
  google::protobuf::Timestamp ts;
  ts.set_seconds(-5);
  EXPECT_TRUE(CheckShapeConstraints(ts).empty());
  google::protobuf::Struct s;  // its descriptor index is 0, like the model's first message
  EXPECT_TRUE(CheckShapeConstraints(s).empty());
}

// PCRE2 reading each pattern as Java does (test::JavaToPcre2Dots) is the
// oracle: the patterns decided without it, by rule or automaton, must agree.
TEST(ShapeChecksTest, PatternsDecideLikeJavaThroughPcre2) {
  Rng rng(99);
  std::vector<std::string> subjects = Probes();
  static const std::vector<std::string> kPieces = {
      "a", "0", "-", ".", "/", ":", " ", "\n", "\r", "\t", std::string("\0", 1), "\xc3\xa9",
      "\xe2\x80\xa8", "\xc2\x85", "\xf0\x9f\x98\x80", "\xff", "\xed\xa0\x80", "\xc0\xaf",
      "\xe0\x9f\xbf", "\xf4\x90\x80\x80", "\xc3", "s3://b/", "file://", "arn:aws:"};
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int n = rng.Below(10);
    for (int k = 0; k < n; ++k) s += rng.Pick(kPieces);
    subjects.push_back(s);
  }
  for (int i = 0; i < 2000; ++i) {  // any bytes at all
    std::string s;
    const int n = rng.Below(6);
    for (int k = 0; k < n; ++k) s += static_cast<char>(rng.Below(256));
    subjects.push_back(s);
  }
  int count = 0;
  const internal::Pattern* const* patterns = internal::AllPatterns(&count);
  ASSERT_GT(count, 20);
  for (int p = 0; p < count; ++p) {
    std::string error;
    auto pcre2 = internal::Regex::Compile(test::JavaToPcre2Dots(std::string(patterns[p]->text())),
                                          internal::Regex::Mode::kFullMatch, &error);
    ASSERT_NE(pcre2, nullptr) << error;
    int mismatches = 0;
    for (const std::string& s : subjects) {
      // Twice in a row: the second answer may come from the memo of the
      // values last accepted, and the next subject's first answer must not.
      const bool want = pcre2->Matches(s);
      for (int k = 0; k < 2; ++k) {
        if (patterns[p]->Matches(s) != want && ++mismatches <= 3) {
          ADD_FAILURE() << "pattern " << patterns[p]->text() << " on '" << absl::CEscape(s)
                        << "' (call " << k + 1 << "): PCRE2 says " << want;
        }
      }
      // And without the memo (a new job's name), after the memo has it.
      if (patterns[p]->Matches(s, internal::Pattern::Memo::kSkip) != want && ++mismatches <= 3) {
        ADD_FAILURE() << "pattern " << patterns[p]->text() << " on '" << absl::CEscape(s)
                      << "' (without the memo): PCRE2 says " << want;
      }
    }
  }
}

TEST(ShapeChecksTest, ShapeConstantsAreTheModel) {
  int checked = 0;
  for (const auto& [name, ref] : Model().shapes()) {
    SCOPED_TRACE(name);
    const internal::Shape* shape = internal::FindShape(name);
    ASSERT_NE(shape, nullptr);
    EXPECT_EQ(shape->name, name);
    EXPECT_EQ(shape->has_min, ref->min.has_value());
    EXPECT_EQ(shape->has_max, ref->max.has_value());
    EXPECT_EQ(shape->min, ref->min.value_or(0));
    EXPECT_EQ(shape->max, ref->max.value_or(0));
    EXPECT_EQ(shape->pattern != nullptr, ref->pattern_text.has_value());
    if (ref->pattern_text && shape->pattern) {
      EXPECT_EQ(shape->pattern->text(), *ref->pattern_text);
    }
    EXPECT_EQ(shape->local_uri_alternative, name == "S3Uri");
    EXPECT_EQ(shape->enum_values != nullptr, !ref->enum_values.empty());
    if (shape->enum_values != nullptr) {
      const internal::EnumTable& table = *shape->enum_values;
      ASSERT_EQ(table.count, static_cast<int>(ref->enum_values.size()));
      for (int i = 0; i < table.count; ++i) {
        EXPECT_EQ(table.values[i], ref->enum_values[i]);  // model order: messages list them
        EXPECT_TRUE(table.Contains(ref->enum_values[i]));
        for (std::string near : {ref->enum_values[i] + "x", ref->enum_values[i].substr(1),
                                 std::string(""), absl::AsciiStrToLower(ref->enum_values[i]),
                                 absl::AsciiStrToUpper(ref->enum_values[i])}) {
          EXPECT_EQ(table.Contains(near), ref->enum_set.count(near) > 0) << near;
        }
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 150);
  EXPECT_EQ(internal::FindShape("NoSuchShape"), nullptr);
  EXPECT_EQ(internal::FindShape(""), nullptr);
}

// A list or map member's minimum size when it is at least 1 (what ParseJson
// must hold an empty one to), else 0, from the model as data.
int64_t RefMinSize(const RefShape& structure, const FieldDescriptor* field) {
  const RefMember* member = Model().MemberOf(structure, field);
  if (member == nullptr) return -1;
  const RefShape& shape = *member->shape;
  if (shape.type != "list" && shape.type != "map") return 0;
  return std::max<int64_t>(shape.min.value_or(0), 0);
}

// The kiln.v1 message of a structure shape, or nullptr.
const Descriptor* ModelMessage(const std::string& shape) {
  return google::protobuf::DescriptorPool::generated_pool()->FindMessageTypeByName("kiln.v1." +
                                                                                   shape);
}

std::string Camel(const std::string& name) {
  return std::string(1, absl::ascii_tolower(name[0])) + name.substr(1);
}

// And the lists written even when empty: required, with no minimum.
TEST(ShapeChecksTest, MinSizeIsTheModels) {
  int sized = 0;
  int always = 0;
  for (const auto& [name, ref] : Model().shapes()) {
    const Descriptor* d = ModelMessage(name);
    if (ref->type != "structure" || d == nullptr) continue;
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* field = d->field(i);
      SCOPED_TRACE(field->full_name());
      EXPECT_EQ(internal::MinSize(*field), RefMinSize(*ref, field));
      if (internal::MinSize(*field) > 0) ++sized;
      const RefMember* member = Model().MemberOf(*ref, field);
      const bool written_when_empty = member != nullptr && member->required &&
                                      field->is_repeated() && RefMinSize(*ref, field) == 0;
      EXPECT_EQ(internal::WrittenWhenEmpty(*field), written_when_empty);
      if (written_when_empty) ++always;
    }
  }
  EXPECT_GE(sized, 6);  // InputDataConfig (twice), the entrypoint and arguments, VPC's two lists
  EXPECT_GE(always, 1);  // ListTrainingJobsResponse's TrainingJobSummaries
  EXPECT_EQ(internal::MinSize(*google::protobuf::Struct::descriptor()->FindFieldByName("fields")),
            0);
}

// Every list and map member the model gives a minimum size, held empty in a
// document of any message, directly or in a list's element: ParseJson must
// refuse it with the validator's words and path (it is too short, not
// missing), and accept every other empty list and map.
TEST(ShapeChecksTest, ParseJsonRefusesEveryEmptyListTheModelForbids) {
  int refused = 0;
  int accepted = 0;
  const auto expect = [&](const Descriptor* d, const std::string& json, int64_t min,
                          const std::string& path, bool map) {
    SCOPED_TRACE(absl::StrCat(d->full_name(), " ", json));
    std::unique_ptr<Message> m(
        google::protobuf::MessageFactory::generated_factory()->GetPrototype(d)->New());
    const absl::Status status = ParseJson(json, *m);
    if (min == 0) {
      EXPECT_TRUE(status.ok()) << status;
      ++accepted;
      return;
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    const std::string message(status.message());
    EXPECT_NE(message.find(absl::StrCat("Value '", map ? "{}" : "[]", "' at '", path,
                                        "' failed to satisfy constraint: Member must have "
                                        "length greater than or equal to ",
                                        min)),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find(absl::StrCat("Value null at '", path, "'")), std::string::npos)
        << message;
    EXPECT_EQ(m->ByteSizeLong(), 0u);
    ++refused;
  };
  for (const auto& [name, ref] : Model().shapes()) {
    const Descriptor* d = ModelMessage(name);
    if (ref->type != "structure" || d == nullptr) continue;
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* field = d->field(i);
      if (!field->is_repeated()) continue;
      const std::string empty = field->is_map() ? "{}" : "[]";
      expect(d, absl::StrCat("{\"", field->json_name(), "\":", empty, "}"),
             RefMinSize(*ref, field), Camel(field->json_name()), field->is_map());
      // One level down, in an element of a list of structures.
      const FieldDescriptor* list = field;
      if (list->is_map() || list->message_type() == nullptr) continue;
      const RefShape* element = Model().MemberOf(*ref, list)->shape->element;
      const Descriptor* e = list->message_type();
      if (element == nullptr || element->type != "structure") continue;
      for (int k = 0; k < e->field_count(); ++k) {
        const FieldDescriptor* inner = e->field(k);
        if (!inner->is_repeated()) continue;
        expect(d,
               absl::StrCat("{\"", list->json_name(), "\":[{\"", inner->json_name(), "\":",
                            inner->is_map() ? "{}" : "[]", "}]}"),
               RefMinSize(*element, inner),
               absl::StrCat(Camel(list->json_name()), ".1.member.", Camel(inner->json_name())),
               inner->is_map());
      }
    }
  }
  EXPECT_GE(refused, 6);
  EXPECT_GT(accepted, 30);
}

// No map of the model has a minimum size, so the checker's map case is
// checked on a shape made for it.
TEST(ShapeChecksTest, EmptyMapWithAMinimumIsReportedAsTooShort) {
  constexpr internal::Shape kMap{.name = "M", .type = internal::ShapeType::kMap, .has_min = true,
                                 .min = 2};
  internal::ShapeChecker checker(ValidationOptions{});
  EXPECT_FALSE(checker.EmptyList("environment", kMap));  // no document: absent
  checker.SetEmptyLists({"outer.environment"});
  checker.Enter("outer");
  EXPECT_FALSE(checker.EmptyList("hyperParameters", kMap));
  EXPECT_TRUE(checker.EmptyList("environment", kMap));
  checker.Leave();
  EXPECT_EQ(Render(checker.Take().kept()),
            Render({ValidationError{"outer.environment",
                                    "Value '{}' at 'outer.environment' failed to satisfy "
                                    "constraint: Member must have length greater than or equal "
                                    "to 2"}}));
}

}  // namespace
}  // namespace kiln
