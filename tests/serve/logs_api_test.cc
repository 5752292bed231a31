// CloudWatch Logs' read API (serve/logs_api.h) on streams held in memory:
// tokens, pages, time ranges, filter patterns and refusals.
#include "serve/logs_api.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kiln/plugin/json_value.h"

namespace kiln::serve::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Streams whose i-th event occupies positions [100 i, 100 (i + 1)).
class MemoryLogReader final : public LogReader {
 public:
  void Add(std::string stream, int64_t seconds, std::string message) {
    streams_[std::move(stream)].push_back({absl::FromUnixSeconds(seconds), std::move(message)});
  }

  absl::StatusOr<std::vector<LogStreamInfo>> ListStreams(std::string_view prefix) const override {
    std::vector<LogStreamInfo> out;
    for (const auto& [name, events] : streams_) {
      if (name.rfind(prefix, 0) != 0) continue;
      LogStreamInfo info;
      info.name = name;
      info.creation_time = events.front().first - absl::Seconds(1);
      info.first_event_time = events.front().first;
      info.last_event_time = events.back().first;
      info.stored_bytes = static_cast<int64_t>(events.size()) * 100;
      out.push_back(info);
    }
    return out;
  }

  absl::StatusOr<std::vector<LogEvent>> ReadEvents(std::string_view name, const LogRange& range,
                                                   bool forward) const override {
    const auto it = streams_.find(std::string(name));
    if (it == streams_.end()) return absl::NotFoundError("no stream");
    std::vector<LogEvent> all;
    for (size_t i = 0; i < it->second.size(); ++i) {
      LogEvent e{it->second[i].first, it->second[i].second, static_cast<int64_t>(i) * 100,
                 static_cast<int64_t>(i + 1) * 100};
      if (e.begin >= range.from && e.end <= range.to && e.timestamp >= range.start_time &&
          e.timestamp < range.end_time) {
        all.push_back(e);
      }
    }
    if (all.size() > range.max_events) {
      if (forward) {
        all.resize(range.max_events);
      } else {
        all.erase(all.begin(), all.end() - static_cast<ptrdiff_t>(range.max_events));
      }
    }
    return all;
  }

 private:
  std::map<std::string, std::vector<std::pair<absl::Time, std::string>>, std::less<>> streams_;
};

class LogsApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 5; ++i)
      reader_.Add("job/algo-1-10", 100 + 2 * i, "one " + std::to_string(i));
    for (int i = 0; i < 3; ++i)
      reader_.Add("job/algo-2-10", 101 + 2 * i, "two " + std::to_string(i));
    reader_.Add("other/algo-1-20", 500, "other");
  }

  JsonValue Call(std::string_view op, std::string_view body, int status = 200) {
    const HttpResponse r = HandleLogs(op, body, &reader_, "us-east-1", "111122223333");
    EXPECT_EQ(r.status, status) << r.body;
    absl::StatusOr<JsonValue> v = ParseJsonValue(r.body);
    EXPECT_TRUE(v.ok()) << r.body;
    return v.ok() ? *v : JsonValue();
  }

  // The error's type and message.
  std::pair<std::string, std::string> Error(std::string_view op, std::string_view body) {
    const JsonValue v = Call(op, body, 400);
    return {v.Find("__type")->string_value(), v.Find("message")->string_value()};
  }

  static std::vector<std::string> Messages(const JsonValue& answer) {
    std::vector<std::string> out;
    for (const JsonValue& e : answer.Find("events")->elements()) {
      out.push_back(e.Find("message")->string_value());
    }
    return out;
  }

  static std::string Str(const JsonValue& v, std::string_view member) {
    return v.Find(member)->string_value();
  }

  MemoryLogReader reader_;
};

constexpr char kStream[] =
    R"("logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamName": "job/algo-1-10")";

TEST_F(LogsApiTest, GetLogEventsPagesForwardAndGivesItsTokenBackAtTheEnd) {
  std::vector<std::string> seen;
  std::string token;
  for (int page = 0; page < 10; ++page) {
    const std::string body =
        absl::StrCat("{", kStream, R"(, "startFromHead": true, "limit": 2)",
                     token.empty() ? "" : absl::StrCat(R"(, "nextToken": ")", token, "\""), "}");
    const JsonValue a = Call("GetLogEvents", body);
    for (std::string& m : Messages(a)) seen.push_back(std::move(m));
    const std::string next = Str(a, "nextForwardToken");
    if (next == token) break;
    token = next;
  }
  EXPECT_THAT(seen, ElementsAre("one 0", "one 1", "one 2", "one 3", "one 4"));
  EXPECT_EQ(token, "f/00000000000000000500");
}

TEST_F(LogsApiTest, GetLogEventsReadsTheTailAndPagesBack) {
  JsonValue a = Call("GetLogEvents", absl::StrCat("{", kStream, R"(, "limit": 2})"));
  EXPECT_THAT(Messages(a), ElementsAre("one 3", "one 4"));
  EXPECT_EQ(Str(a, "nextBackwardToken"), "b/00000000000000000300");
  a = Call("GetLogEvents", absl::StrCat("{", kStream, R"(, "limit": 2, "nextToken": ")",
                                        Str(a, "nextBackwardToken"), "\"}"));
  EXPECT_THAT(Messages(a), ElementsAre("one 1", "one 2"));
  a = Call("GetLogEvents", absl::StrCat("{", kStream, R"(, "limit": 2, "nextToken": ")",
                                        Str(a, "nextBackwardToken"), "\"}"));
  EXPECT_THAT(Messages(a), ElementsAre("one 0"));
  a = Call("GetLogEvents", absl::StrCat("{", kStream, R"(, "limit": 2, "nextToken": ")",
                                        Str(a, "nextBackwardToken"), "\"}"));
  EXPECT_THAT(Messages(a), ElementsAre());
  // Times in milliseconds: [startTime, endTime).
  a = Call("GetLogEvents", absl::StrCat("{", kStream,
                                        R"(, "startFromHead": true, "startTime": 102000,
                                            "endTime": 106000})"));
  EXPECT_THAT(Messages(a), ElementsAre("one 1", "one 2"));
  EXPECT_EQ(a.Find("events")->elements()[0].Find("timestamp")->number_lexeme(), "102000");
}

TEST_F(LogsApiTest, BadRequestsNameTheMemberAndTheRule) {
  auto [type, message] =
      Error("GetLogEvents", absl::StrCat("{", kStream, R"(, "nextToken": "x/1"})"));
  EXPECT_EQ(type, "InvalidParameterException");
  EXPECT_EQ(message, "The specified nextToken is invalid.");
  std::tie(type, message) = Error("GetLogEvents", absl::StrCat("{", kStream, R"(, "limit": 0})"));
  EXPECT_EQ(type, "InvalidParameterException");
  EXPECT_THAT(message, HasSubstr("at 'limit' failed to satisfy constraint"));
  std::tie(type, message) =
      Error("GetLogEvents", absl::StrCat("{", kStream, R"(, "limit": 10001})"));
  EXPECT_THAT(message, HasSubstr("less than or equal to 10000"));
  std::tie(type, message) =
      Error("GetLogEvents", absl::StrCat("{", kStream, R"(, "startTime": "soon"})"));
  EXPECT_EQ(type, "SerializationException");
  EXPECT_THAT(message, HasSubstr("startTime must be an integer"));
  std::tie(type, message) =
      Error("GetLogEvents", absl::StrCat("{", kStream, R"(, "startFromHed": true})"));
  EXPECT_EQ(type, "InvalidParameterException");
  EXPECT_THAT(message, HasSubstr("\"startFromHed\""));
  std::tie(type, message) =
      Error("GetLogEvents", R"({"logGroupName": "/aws/sagemaker/TrainingJobs"})");
  EXPECT_THAT(message, HasSubstr("at 'logStreamName'"));
  std::tie(type, message) = Error("GetLogEvents", "[1]");
  EXPECT_EQ(type, "SerializationException");
  std::tie(type, message) = Error("DescribeLogStreams", "{}");
  EXPECT_EQ(type, "InvalidParameterException");
  EXPECT_THAT(message, HasSubstr("LogGroupName or LogGroupIdentifier"));
  std::tie(type, message) = Error("DescribeLogStreams", R"({"logGroupName": "/aws/lambda/f"})");
  EXPECT_EQ(type, "ResourceNotFoundException");
  std::tie(type, message) =
      Error("GetLogEvents",
            R"({"logGroupName": "/aws/sagemaker/TrainingJobs", "logStreamName": "job/algo-9-1"})");
  EXPECT_EQ(type, "ResourceNotFoundException");
  EXPECT_EQ(message, "The specified log stream does not exist.");
  // Without a reader, no group.
  const HttpResponse r =
      HandleLogs("DescribeLogStreams", R"({"logGroupName": "/aws/sagemaker/TrainingJobs"})",
                 nullptr, "us-east-1", "111122223333");
  EXPECT_EQ(r.status, 400);
  EXPECT_THAT(r.body, HasSubstr("ResourceNotFoundException"));
  EXPECT_THAT(HandleLogs("PutLogEvents", "{}", &reader_, "us-east-1", "1").body,
              HasSubstr("UnknownOperationException"));
}

TEST_F(LogsApiTest, DescribeLogStreamsPagesInEitherOrder) {
  std::vector<std::string> names;
  std::string token;
  do {
    const JsonValue a = Call(
        "DescribeLogStreams",
        absl::StrCat(R"({"logGroupIdentifier": "arn:aws:logs:us-east-1:111122223333:log-group:)",
                     R"(/aws/sagemaker/TrainingJobs", "descending": true, "limit": 1)",
                     token.empty() ? "" : absl::StrCat(R"(, "nextToken": ")", token, "\""), "}"));
    for (const JsonValue& s : a.Find("logStreams")->elements()) {
      names.push_back(Str(s, "logStreamName"));
      EXPECT_EQ(Str(s, "arn"),
                "arn:aws:logs:us-east-1:111122223333:log-group:/aws/sagemaker/TrainingJobs:"
                "log-stream:" +
                    names.back());
    }
    token = a.Find("nextToken") ? Str(a, "nextToken") : "";
  } while (!token.empty());
  EXPECT_THAT(names, ElementsAre("other/algo-1-20", "job/algo-2-10", "job/algo-1-10"));

  const JsonValue by_time = Call("DescribeLogStreams", R"({"logGroupName":
      "/aws/sagemaker/TrainingJobs", "orderBy": "LastEventTime"})");
  std::vector<std::string> order;
  for (const JsonValue& s : by_time.Find("logStreams")->elements()) {
    order.push_back(Str(s, "logStreamName"));
  }
  EXPECT_THAT(order, ElementsAre("job/algo-2-10", "job/algo-1-10", "other/algo-1-20"));
  EXPECT_EQ(by_time.Find("logStreams")->elements()[1].Find("lastEventTimestamp")->number_lexeme(),
            "108000");
}

TEST_F(LogsApiTest, FilterLogEventsInterleavesStreamsOnceEachAcrossPages) {
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    const JsonValue a = Call(
        "FilterLogEvents",
        absl::StrCat(R"({"logGroupName": "/aws/sagemaker/TrainingJobs", )",
                     R"("logStreamNamePrefix": "job/", "limit": 3)",
                     token.empty() ? "" : absl::StrCat(R"(, "nextToken": ")", token, "\""), "}"));
    for (std::string& m : Messages(a)) seen.push_back(std::move(m));
    token = a.Find("nextToken") ? Str(a, "nextToken") : "";
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_THAT(seen,
              ElementsAre("one 0", "two 0", "one 1", "two 1", "one 2", "two 2", "one 3", "one 4"));

  const JsonValue found = Call("FilterLogEvents", R"({"logGroupName":
      "/aws/sagemaker/TrainingJobs", "filterPattern": "?one ?other -3", "startTime": 104000})");
  EXPECT_THAT(Messages(found), ElementsAre("one 2", "one 4", "other"));
  for (const JsonValue& s : found.Find("searchedLogStreams")->elements()) {
    EXPECT_TRUE(s.Find("searchedCompletely")->bool_value());
  }
  const JsonValue phrase = Call("FilterLogEvents", R"({"logGroupName":
      "/aws/sagemaker/TrainingJobs", "filterPattern": "\"two 1\"",
      "logStreamNames": ["job/algo-2-10"]})");
  EXPECT_THAT(Messages(phrase), ElementsAre("two 1"));
  EXPECT_EQ(Error("FilterLogEvents", R"({"logGroupName": "/aws/sagemaker/TrainingJobs",
      "filterPattern": "[ip, user]"})")
                .first,
            "InvalidParameterException");
  EXPECT_THAT(Error("FilterLogEvents", R"({"logGroupName": "/aws/sagemaker/TrainingJobs",
      "logStreamNames": ["a"], "logStreamNamePrefix": "b"})")
                  .second,
              HasSubstr("cannot specify both"));
}

}  // namespace
}  // namespace kiln::serve::internal
