// CloudWatch Logs' read API for training logs (logs_api.h).
#include "serve/logs_api.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "kiln/plugin/json_value.h"

namespace kiln::serve::internal {
namespace {

constexpr char kInvalidParameter[] = "InvalidParameterException";
constexpr char kResourceNotFound[] = "ResourceNotFoundException";
constexpr int64_t kMaxEvents = 10000;
// What one answer holds at most, as the service bounds it.
constexpr size_t kMaxAnswerBytes = size_t{1} << 20;
// How much of the streams one FilterLogEvents reads at most before it gives
// a token to go on with.
constexpr size_t kMaxFilterScanBytes = size_t{64} << 20;

absl::string_view Av(std::string_view s) { return absl::string_view(s.data(), s.size()); }

HttpResponse Invalid(std::string_view message) {
  return ErrorResponse(400, kInvalidParameter, message);
}

// "1 validation error detected: Value '0' at 'limit' failed to satisfy
// constraint: ...", as the service words a member that breaks its rule.
HttpResponse ConstraintError(std::string_view member, std::string_view value,
                             std::string_view rule) {
  return Invalid(absl::StrCat("1 validation error detected: Value '", TextForMessage(value),
                              "' at '", Av(member), "' failed to satisfy constraint: ", Av(rule)));
}

// The members of a request, checked against what the operation takes.
class Members {
 public:
  // Parses `body`; `error` is the refusal when it is not an object of the
  // named members.
  Members(std::string_view body, std::initializer_list<std::string_view> known,
          std::optional<HttpResponse>& error) {
    absl::StatusOr<JsonValue> v = ParseJsonValue(body.empty() ? std::string_view("{}") : body);
    if (!v.ok()) {
      error = ErrorResponse(400, "SerializationException",
                            absl::StrCat("the request body is not JSON: ", v.status().message()));
      return;
    }
    if (!v->is_object()) {
      error = ErrorResponse(400, "SerializationException", "the request body is not a JSON object");
      return;
    }
    value_ = *std::move(v);
    for (const auto& m : value_.members()) {
      if (std::find(known.begin(), known.end(), m.first) == known.end()) {
        error = Invalid(absl::StrCat("unknown member ", JsonForMessage(JsonValue::String(m.first)),
                                     ": this operation takes none of that name"));
        return;
      }
    }
  }

  bool String(std::string_view name, std::string& out, std::optional<HttpResponse>& error) const {
    const JsonValue* v = value_.Find(name);
    if (v == nullptr || v->is_null()) return false;
    if (!v->is_string()) {
      error = TypeError(name, "a string", *v);
      return false;
    }
    out = v->string_value();
    return true;
  }

  bool Int(std::string_view name, int64_t& out, std::optional<HttpResponse>& error) const {
    const JsonValue* v = value_.Find(name);
    if (v == nullptr || v->is_null()) return false;
    absl::StatusOr<int64_t> n = v->is_number() ? v->AsInt64() : absl::InvalidArgumentError("");
    if (!n.ok()) {
      error = TypeError(name, "an integer", *v);
      return false;
    }
    out = *n;
    return true;
  }

  bool Bool(std::string_view name, bool& out, std::optional<HttpResponse>& error) const {
    const JsonValue* v = value_.Find(name);
    if (v == nullptr || v->is_null()) return false;
    if (!v->is_bool()) {
      error = TypeError(name, "a boolean", *v);
      return false;
    }
    out = v->bool_value();
    return true;
  }

  bool Strings(std::string_view name, std::vector<std::string>& out,
               std::optional<HttpResponse>& error) const {
    const JsonValue* v = value_.Find(name);
    if (v == nullptr || v->is_null()) return false;
    if (!v->is_array()) {
      error = TypeError(name, "a list of strings", *v);
      return false;
    }
    for (const JsonValue& e : v->elements()) {
      if (!e.is_string()) {
        error = TypeError(name, "a list of strings", *v);
        return false;
      }
      out.push_back(e.string_value());
    }
    return true;
  }

 private:
  static HttpResponse TypeError(std::string_view name, std::string_view want, const JsonValue& v) {
    return ErrorResponse(
        400, "SerializationException",
        absl::StrCat(Av(name), " must be ", Av(want), ", not ", JsonForMessage(v)));
  }

  JsonValue value_;
};

// The log group a request names (logGroupName, or logGroupIdentifier: a name
// or an ARN); false with the refusal when it is missing or not the training
// log group of this account.
bool CheckGroup(const Members& m, const LogReader* reader, std::string_view region,
                std::string_view account, std::optional<HttpResponse>& error) {
  std::string name, identifier;
  const bool has_name = m.String("logGroupName", name, error);
  if (error) return false;
  const bool has_identifier = m.String("logGroupIdentifier", identifier, error);
  if (error) return false;
  if (has_name && has_identifier) {
    error = Invalid("LogGroupName and LogGroupIdentifier are mutually exclusive parameters.");
    return false;
  }
  if (!has_name && !has_identifier) {
    error = Invalid("Either LogGroupName or LogGroupIdentifier must be specified.");
    return false;
  }
  if (has_identifier) {
    const std::string arn = absl::StrCat("arn:aws:logs:", Av(region), ":", Av(account),
                                         ":log-group:", kTrainingLogGroup);
    name = identifier == arn || identifier == arn + ":*" ? kTrainingLogGroup : identifier;
  }
  if (name != kTrainingLogGroup || reader == nullptr) {
    error = ErrorResponse(400, kResourceNotFound, "The specified log group does not exist.");
    return false;
  }
  return true;
}

bool Limit(const Members& m, int64_t max, int64_t& limit, std::optional<HttpResponse>& error) {
  limit = max;
  if (!m.Int("limit", limit, error)) return !error;
  if (limit < 1) {
    error = ConstraintError("limit", absl::StrCat(limit),
                            "Member must have value greater than or equal to 1");
    return false;
  }
  if (limit > max) {
    error = ConstraintError("limit", absl::StrCat(limit),
                            absl::StrCat("Member must have value less than or equal to ", max));
    return false;
  }
  return true;
}

// startTime and endTime (milliseconds since the epoch) as a range.
bool Times(const Members& m, LogRange& range, std::optional<HttpResponse>& error) {
  int64_t ms = 0;
  if (m.Int("startTime", ms, error)) range.start_time = absl::FromUnixMillis(ms);
  if (error) return false;
  if (m.Int("endTime", ms, error)) range.end_time = absl::FromUnixMillis(ms);
  if (error) return false;
  return true;
}

int64_t Millis(absl::Time t) { return absl::ToUnixMillis(t); }

std::string Arn(std::string_view region, std::string_view account, std::string_view stream) {
  return absl::StrCat("arn:aws:logs:", Av(region), ":", Av(account),
                      ":log-group:", kTrainingLogGroup, ":log-stream:", Av(stream));
}

HttpResponse Answer(const JsonValue& body) {
  HttpResponse r;
  r.body = WriteJson(body);
  return r;
}

HttpResponse ReaderFailure(const absl::Status& s) {
  if (s.code() == absl::StatusCode::kNotFound) {
    return ErrorResponse(400, kResourceNotFound, "The specified log stream does not exist.");
  }
  return ErrorResponse(500, "ServiceUnavailableException",
                       absl::StrCat("the log streams cannot be read: ", s.message()));
}

HttpResponse BadToken() { return Invalid("The specified nextToken is invalid."); }

// ---- DescribeLogStreams ----------------------------------------------------

HttpResponse DescribeLogStreams(std::string_view body, const LogReader* reader,
                                std::string_view region, std::string_view account) {
  std::optional<HttpResponse> error;
  const Members m(body,
                  {"logGroupName", "logGroupIdentifier", "logStreamNamePrefix", "orderBy",
                   "descending", "nextToken", "limit"},
                  error);
  if (error) return *error;
  if (!CheckGroup(m, reader, region, account, error)) return *error;
  std::string prefix, order_by = "LogStreamName", token;
  bool descending = false;
  int64_t limit = 50;
  const bool has_prefix = m.String("logStreamNamePrefix", prefix, error);
  m.String("orderBy", order_by, error);
  m.Bool("descending", descending, error);
  const bool has_token = m.String("nextToken", token, error);
  if (error || !Limit(m, 50, limit, error)) return *error;
  if (order_by != "LogStreamName" && order_by != "LastEventTime") {
    return ConstraintError("orderBy", order_by,
                           "Member must satisfy enum value set: [LogStreamName, LastEventTime]");
  }
  const bool by_time = order_by == "LastEventTime";
  if (by_time && has_prefix) {
    return Invalid("Cannot order by LastEventTime with a logStreamNamePrefix.");
  }
  absl::StatusOr<std::vector<LogStreamInfo>> streams = reader->ListStreams(prefix);
  if (!streams.ok()) return ReaderFailure(streams.status());
  // The order, and each stream's place in it as a token says it.
  auto key = [&](const LogStreamInfo& s) {
    return by_time ? absl::StrFormat("%020d\t%s",
                                     Millis(s.last_event_time) < 0 ? 0 : Millis(s.last_event_time),
                                     s.name)
                   : s.name;
  };
  std::vector<std::pair<std::string, const LogStreamInfo*>> order;
  order.reserve(streams->size());
  for (const LogStreamInfo& s : *streams) order.emplace_back(key(s), &s);
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return descending ? a.first > b.first : a.first < b.first;
  });
  size_t at = 0;
  if (has_token) {
    std::string raw;
    absl::string_view after;
    if (!absl::WebSafeBase64Unescape(Av(token), &raw) ||
        !absl::ConsumePrefix(&(after = raw), by_time ? "t\t" : "n\t")) {
      return BadToken();
    }
    while (at < order.size() &&
           (descending ? order[at].first >= after : order[at].first <= after)) {
      ++at;
    }
  }
  JsonValue out = JsonValue::Object();
  JsonValue list = JsonValue::Array();
  const size_t end = std::min(order.size(), at + static_cast<size_t>(limit));
  for (size_t i = at; i < end; ++i) {
    const LogStreamInfo& s = *order[i].second;
    JsonValue e = JsonValue::Object();
    e.Set("logStreamName", JsonValue::String(s.name));
    e.Set("creationTime", JsonValue::Int(Millis(s.creation_time)));
    if (s.first_event_time != absl::InfinitePast()) {
      e.Set("firstEventTimestamp", JsonValue::Int(Millis(s.first_event_time)));
      e.Set("lastEventTimestamp", JsonValue::Int(Millis(s.last_event_time)));
      e.Set("lastIngestionTime", JsonValue::Int(Millis(s.last_event_time)));
    }
    e.Set("arn", JsonValue::String(Arn(region, account, s.name)));
    e.Set("storedBytes", JsonValue::Int(s.stored_bytes));
    list.Push(std::move(e));
  }
  out.Set("logStreams", std::move(list));
  if (end < order.size()) {
    out.Set("nextToken", JsonValue::String(absl::WebSafeBase64Escape(
                             absl::StrCat(by_time ? "t\t" : "n\t", order[end - 1].first))));
  }
  return Answer(out);
}

// ---- GetLogEvents ----------------------------------------------------------

std::string PositionToken(char direction, int64_t position) {
  return absl::StrFormat("%c/%020d", direction, position);
}

bool ParsePositionToken(std::string_view token, char& direction, int64_t& position) {
  if (token.size() < 3 || (token[0] != 'f' && token[0] != 'b') || token[1] != '/') return false;
  direction = token[0];
  const absl::string_view digits = Av(token.substr(2));
  return std::all_of(digits.begin(), digits.end(), absl::ascii_isdigit) &&
         absl::SimpleAtoi(digits, &position);
}

HttpResponse GetLogEvents(std::string_view body, const LogReader* reader, std::string_view region,
                          std::string_view account) {
  std::optional<HttpResponse> error;
  const Members m(body,
                  {"logGroupName", "logGroupIdentifier", "logStreamName", "startTime", "endTime",
                   "nextToken", "limit", "startFromHead", "unmask"},
                  error);
  if (error) return *error;
  if (!CheckGroup(m, reader, region, account, error)) return *error;
  std::string stream, token;
  bool from_head = false, unmask = false;
  int64_t limit = 0;
  LogRange range;
  if (!m.String("logStreamName", stream, error)) {
    return error ? *error : ConstraintError("logStreamName", "null", "Member must not be null");
  }
  const bool has_token = m.String("nextToken", token, error);
  m.Bool("startFromHead", from_head, error);
  m.Bool("unmask", unmask, error);
  if (error || !Limit(m, kMaxEvents, limit, error) || !Times(m, range, error)) return *error;
  range.max_events = static_cast<size_t>(limit);
  range.max_bytes = kMaxAnswerBytes;
  bool forward = from_head;
  int64_t position = 0;
  if (has_token) {
    char direction = 0;
    if (!ParsePositionToken(token, direction, position)) return BadToken();
    forward = direction == 'f';
  }
  if (forward) {
    range.from = position;
  } else if (has_token) {
    range.to = position;
  }
  absl::StatusOr<std::vector<LogEvent>> events = reader->ReadEvents(stream, range, forward);
  if (!events.ok()) return ReaderFailure(events.status());
  JsonValue list = JsonValue::Array();
  for (const LogEvent& e : *events) {
    list.Push(JsonValue::Object()
                  .Set("timestamp", JsonValue::Int(Millis(e.timestamp)))
                  .Set("message", JsonValue::String(e.message))
                  .Set("ingestionTime", JsonValue::Int(Millis(e.timestamp))));
  }
  JsonValue out = JsonValue::Object();
  out.Set("events", std::move(list));
  // Where to go on from: past the last event and before the first; with no
  // event, where this read was (a forward token comes back unchanged).
  const int64_t here = forward ? range.from : (has_token ? range.to : 0);
  out.Set("nextForwardToken",
          JsonValue::String(PositionToken('f', events->empty() ? here : events->back().end)));
  out.Set("nextBackwardToken",
          JsonValue::String(PositionToken('b', events->empty() ? here : events->front().begin)));
  return Answer(out);
}

// ---- FilterLogEvents -------------------------------------------------------

// A filter pattern of plain terms, as the service reads them: every term must
// appear in a message ("quoted phrases" are one term), none of those marked
// '-', and at least one of those marked '?' when there are any. Terms match
// case-sensitively. JSON ({...}), space-delimited ([...]) and regular
// expression (%...%) patterns are refused by name.
class FilterPattern {
 public:
  // The refusal, when `text` is not a pattern of terms.
  std::optional<HttpResponse> Parse(std::string_view text) {
    const absl::string_view t = absl::StripAsciiWhitespace(Av(text));
    if (!t.empty() && (t[0] == '{' || t[0] == '[' || t[0] == '%')) {
      return Invalid(absl::StrCat(
          "filterPattern ", JsonForMessage(JsonValue::String(std::string(text))),
          ": JSON, space-delimited and regular-expression patterns are not supported; use "
          "terms: words or \"quoted phrases\" that must all appear, ?terms of which one must, "
          "-terms that must not"));
    }
    for (size_t i = 0; i < t.size();) {
      if (t[i] == ' ' || t[i] == '\t') {
        ++i;
        continue;
      }
      char mark = 0;
      if ((t[i] == '?' || t[i] == '-') && i + 1 < t.size() && t[i + 1] != ' ') mark = t[i++];
      std::string term;
      if (t[i] == '"') {
        const size_t close = t.find('"', i + 1);
        if (close == absl::string_view::npos) {
          return Invalid(absl::StrCat("filterPattern ",
                                      JsonForMessage(JsonValue::String(std::string(text))),
                                      ": a quoted phrase has no closing '\"'"));
        }
        term = std::string(t.substr(i + 1, close - i - 1));
        i = close + 1;
      } else {
        const size_t end = std::min(t.find_first_of(" \t", i), t.size());
        term = std::string(t.substr(i, end - i));
        i = end;
      }
      if (term.empty()) continue;
      (mark == '?' ? any_ : mark == '-' ? none_ : all_).push_back(std::move(term));
    }
    return std::nullopt;
  }

  bool Matches(std::string_view message) const {
    const absl::string_view m = Av(message);
    for (const std::string& t : all_) {
      if (!absl::StrContains(m, t)) return false;
    }
    for (const std::string& t : none_) {
      if (absl::StrContains(m, t)) return false;
    }
    if (any_.empty()) return true;
    return std::any_of(any_.begin(), any_.end(),
                       [&](const std::string& t) { return absl::StrContains(m, t); });
  }

 private:
  std::vector<std::string> all_, any_, none_;
};

// FNV-1a: a stream's part of its events' ids, the same in every process.
uint64_t StreamHash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

// A FilterLogEvents token: where each stream's search goes on ("" when none
// was searched yet).
std::string EncodeFilterToken(const std::map<std::string, int64_t>& positions) {
  std::string raw = "v1\n";
  for (const auto& [name, position] : positions) absl::StrAppend(&raw, position, "\t", name, "\n");
  return absl::WebSafeBase64Escape(raw);
}

bool DecodeFilterToken(std::string_view token, std::map<std::string, int64_t>& positions) {
  std::string raw;
  if (!absl::WebSafeBase64Unescape(Av(token), &raw) || !absl::StartsWith(raw, "v1\n")) {
    return false;
  }
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(raw).substr(3), '\n', absl::SkipEmpty())) {
    const size_t tab = line.find('\t');
    int64_t position = 0;
    if (tab == absl::string_view::npos || !absl::SimpleAtoi(line.substr(0, tab), &position) ||
        position < 0) {
      return false;
    }
    positions[std::string(line.substr(tab + 1))] = position;
  }
  return true;
}

HttpResponse FilterLogEvents(std::string_view body, const LogReader* reader,
                             std::string_view region, std::string_view account) {
  std::optional<HttpResponse> error;
  const Members m(
      body,
      {"logGroupName", "logGroupIdentifier", "logStreamNames", "logStreamNamePrefix", "startTime",
       "endTime", "filterPattern", "nextToken", "limit", "interleaved", "unmask"},
      error);
  if (error) return *error;
  if (!CheckGroup(m, reader, region, account, error)) return *error;
  std::vector<std::string> names;
  std::string prefix, pattern_text, token;
  bool interleaved = true, unmask = false;
  int64_t limit = 0;
  LogRange times;
  const bool has_names = m.Strings("logStreamNames", names, error);
  const bool has_prefix = m.String("logStreamNamePrefix", prefix, error);
  m.String("filterPattern", pattern_text, error);
  const bool has_token = m.String("nextToken", token, error);
  m.Bool("interleaved", interleaved, error);
  m.Bool("unmask", unmask, error);
  if (error || !Limit(m, kMaxEvents, limit, error) || !Times(m, times, error)) return *error;
  if (has_names && has_prefix) {
    return Invalid("You cannot specify both LogStreamNames and LogStreamNamePrefix.");
  }
  if (has_names && (names.empty() || names.size() > 100)) {
    return ConstraintError("logStreamNames", absl::StrCat(names.size(), " names"),
                           "Member must have length between 1 and 100");
  }
  FilterPattern pattern;
  if (std::optional<HttpResponse> bad = pattern.Parse(pattern_text)) return *bad;
  std::map<std::string, int64_t> positions;
  if (has_token && !DecodeFilterToken(token, positions)) return BadToken();

  absl::StatusOr<std::vector<LogStreamInfo>> listed = reader->ListStreams(prefix);
  if (!listed.ok()) return ReaderFailure(listed.status());
  const std::set<std::string> wanted(names.begin(), names.end());

  // Each stream's matching events from where its search stands, up to
  // `limit`, within the scan budget.
  struct Search {
    const LogStreamInfo* info;
    int64_t from;
    std::vector<LogEvent> matches;
    int64_t scanned_to;  // past the last event read
    bool exhausted = false;
  };
  std::vector<Search> searches;
  size_t scanned = 0;
  for (const LogStreamInfo& s : *listed) {
    if (has_names && !wanted.count(s.name)) continue;
    const auto p = positions.find(s.name);
    Search search{&s, p == positions.end() ? 0 : p->second, {}, 0};
    search.scanned_to = search.from;
    // (A stream whose events all lie outside the times has nothing to give.)
    search.exhausted = s.first_event_time == absl::InfinitePast() ||
                       s.last_event_time < times.start_time || s.first_event_time >= times.end_time;
    while (!search.exhausted && search.matches.size() < static_cast<size_t>(limit)) {
      if (scanned >= kMaxFilterScanBytes) break;
      LogRange range = times;
      range.from = search.scanned_to;
      range.max_events = static_cast<size_t>(limit);
      absl::StatusOr<std::vector<LogEvent>> events = reader->ReadEvents(s.name, range, true);
      if (events.status().code() == absl::StatusCode::kNotFound) {
        search.exhausted = true;  // (deleted meanwhile)
        break;
      }
      if (!events.ok()) return ReaderFailure(events.status());
      if (events->empty()) {
        search.exhausted = true;
        break;
      }
      for (LogEvent& e : *events) {
        scanned += e.message.size() + 1;
        search.scanned_to = e.end;
        if (pattern.Matches(e.message)) search.matches.push_back(std::move(e));
        if (search.matches.size() == static_cast<size_t>(limit)) break;
      }
    }
    searches.push_back(std::move(search));
  }

  // All matches in time order (streams in name order at the same time), as
  // many as fit.
  struct Pick {
    absl::Time time;
    size_t search;
    size_t index;
  };
  std::vector<Pick> picks;
  for (size_t i = 0; i < searches.size(); ++i) {
    for (size_t j = 0; j < searches[i].matches.size(); ++j) {
      picks.push_back({searches[i].matches[j].timestamp, i, j});
    }
  }
  std::stable_sort(picks.begin(), picks.end(),
                   [](const Pick& a, const Pick& b) { return a.time < b.time; });
  JsonValue list = JsonValue::Array();
  std::vector<size_t> taken(searches.size(), 0);
  size_t bytes = 0;
  for (const Pick& p : picks) {
    const LogEvent& e = searches[p.search].matches[p.index];
    if (list.size() == static_cast<size_t>(limit) ||
        (list.size() > 0 && bytes + e.message.size() > kMaxAnswerBytes)) {
      break;
    }
    bytes += e.message.size();
    const std::string& name = searches[p.search].info->name;
    list.Push(JsonValue::Object()
                  .Set("logStreamName", JsonValue::String(name))
                  .Set("timestamp", JsonValue::Int(Millis(e.timestamp)))
                  .Set("message", JsonValue::String(e.message))
                  .Set("ingestionTime", JsonValue::Int(Millis(e.timestamp)))
                  .Set("eventId", JsonValue::String(
                                      absl::StrFormat("%020u%020d", StreamHash(name), e.begin))));
    taken[p.search] = p.index + 1;
  }
  // Where each stream's search goes on, and whether it is done.
  bool done = true;
  JsonValue searched = JsonValue::Array();
  for (size_t i = 0; i < searches.size(); ++i) {
    Search& s = searches[i];
    const bool all_taken = taken[i] == s.matches.size();
    const int64_t next = all_taken      ? s.scanned_to
                         : taken[i] > 0 ? s.matches[taken[i] - 1].end
                                        : s.from;
    if (next > 0) positions[s.info->name] = next;
    const bool complete = s.exhausted && all_taken;
    done = done && complete;
    searched.Push(JsonValue::Object()
                      .Set("logStreamName", JsonValue::String(s.info->name))
                      .Set("searchedCompletely", JsonValue::Bool(complete)));
  }
  JsonValue out = JsonValue::Object();
  out.Set("events", std::move(list));
  out.Set("searchedLogStreams", std::move(searched));
  if (!done) out.Set("nextToken", JsonValue::String(EncodeFilterToken(positions)));
  return Answer(out);
}

}  // namespace

HttpResponse HandleLogs(std::string_view operation, std::string_view body, const LogReader* reader,
                        std::string_view region, std::string_view account) {
  if (operation == "DescribeLogStreams") return DescribeLogStreams(body, reader, region, account);
  if (operation == "GetLogEvents") return GetLogEvents(body, reader, region, account);
  if (operation == "FilterLogEvents") return FilterLogEvents(body, reader, region, account);
  return ErrorResponse(400, "UnknownOperationException", "");
}

}  // namespace kiln::serve::internal
