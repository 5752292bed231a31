// The request corpus (tests/corpus/*.json): every request parses, validates,
// and comes back out of ToJson with nothing lost.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "kiln/json.h"
#include "kiln/validation.h"

namespace kiln {
namespace {

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The JSON as a generic tree, to compare documents regardless of member order.
google::protobuf::Value Tree(const std::string& json) {
  google::protobuf::Value v;
  EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(json, &v).ok()) << json;
  return v;
}

std::vector<std::filesystem::path> CorpusFiles() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(KILN_CORPUS_DIR)) {
    if (entry.path().extension() == ".json") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(CorpusTest, HasTheFiveRequestKinds) { EXPECT_GE(CorpusFiles().size(), 5u); }

TEST(CorpusTest, EveryRequestIsValidAndRoundTripsWithoutLoss) {
  for (const auto& path : CorpusFiles()) {
    SCOPED_TRACE(path.string());
    const std::string original = ReadFile(path);
    v1::CreateTrainingJobRequest request;
    ASSERT_TRUE(ParseJson(original, request).ok());
    EXPECT_TRUE(ValidateCreateTrainingJobRequest(request).ok())
        << ValidateCreateTrainingJobRequest(request);
    const std::string out = ToJson(request);
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(Tree(original), Tree(out)))
        << "in:  " << original << "\nout: " << out;
    v1::CreateTrainingJobRequest again;
    ASSERT_TRUE(ParseJson(out, again).ok());
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(request, again));
  }
}

}  // namespace
}  // namespace kiln
