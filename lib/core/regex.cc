#include "core/internal/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>
#include <utility>

namespace kiln::internal {
namespace {

// The model's patterns are Java regexes. PCRE2 reads them the same way except
// for Java's POSIX property names (\p{Alnum} ...), which are ASCII-only in Java
// and map onto PCRE2's POSIX bracket classes, and for the dot, which in Java
// matches no line terminator (\n, \r, U+0085, U+2028, U+2029) and in PCRE2
// only no \n: the shape checks spell the model's dots out (shapes.cc,
// JavaDots); a metric regex, run on log lines split at \n, keeps PCRE2's.
std::string JavaToPcre2(std::string_view java) {
  static constexpr std::pair<std::string_view, std::string_view> kPosix[] = {
      {"Alnum", "alnum"}, {"Alpha", "alpha"}, {"Digit", "digit"}, {"Upper", "upper"},
      {"Lower", "lower"}, {"Punct", "punct"}, {"Space", "space"}, {"XDigit", "xdigit"}};
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < java.size(); ++i) {
    char c = java[i];
    if (c == '\\' && i + 1 < java.size()) {
      if (java[i + 1] == 'p' && i + 2 < java.size() && java[i + 2] == '{') {
        size_t close = java.find('}', i);
        std::string_view name = java.substr(i + 3, close - i - 3);
        bool mapped = false;
        for (const auto& [from, to] : kPosix) {
          if (name == from) {
            out += in_class ? "[:" + std::string(to) + ":]" : "[[:" + std::string(to) + ":]]";
            mapped = true;
          }
        }
        if (mapped) {
          i = close;
          continue;
        }
      }
      out += c;
      out += java[++i];
      continue;
    }
    if (c == '[') in_class = true;
    if (c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

std::unique_ptr<Regex> Regex::Compile(std::string_view pattern, Mode mode, std::string* error) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = JavaToPcre2(pattern);
  uint32_t options = PCRE2_UTF;
  if (mode == Mode::kFullMatch) options |= PCRE2_ANCHORED | PCRE2_ENDANCHORED;
  pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()),
                                       translated.size(), options, &code, &offset, nullptr);
  if (compiled == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(code, buffer, sizeof(buffer));
    if (error != nullptr) {
      *error = std::string(reinterpret_cast<const char*>(buffer)) + " at offset " +
               std::to_string(offset);
    }
    return nullptr;
  }
  // JIT makes matching several times faster (metric regexes see every log
  // line); where it is unavailable the interpreter is used.
  const bool jit = pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE) == 0;
  std::unique_ptr<Regex> result(new Regex());
  result->text_ = std::string(pattern);
  result->code_ = compiled;
  result->jit_ = jit;
  return result;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

bool Regex::Matches(std::string_view text) const { return Search(text, nullptr); }

namespace {

// Match data reused by every match on this thread: only the whole match and
// the first group are ever read, so two pairs are enough (PCRE2 returns 0 when
// a match has more groups than fit, which still means "matched").
pcre2_match_data* ThreadMatchData() {
  struct Holder {
    pcre2_match_data* data = pcre2_match_data_create(2, nullptr);
    ~Holder() { pcre2_match_data_free(data); }
  };
  thread_local Holder holder;
  return holder.data;
}

}  // namespace

bool Regex::MatchesValidUtf8(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), 0, 0, ThreadMatchData(), nullptr)
                      : pcre2_match(code, subject, text.size(), 0, PCRE2_NO_UTF_CHECK,
                                    ThreadMatchData(), nullptr);
  return rc >= 0;
}

bool Regex::Search(std::string_view text, std::string* group) const {
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* data = ThreadMatchData();
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0,
                             data, nullptr);
  const bool matched = rc >= 0;  // negative: no match, or an error such as invalid UTF-8
  if (matched && group != nullptr) {
    PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    // The first group when the pattern has one and it took part; else the whole match.
    int index = (rc == 0 || rc >= 2) && pcre2_get_ovector_count(data) >= 2 ? 1 : 0;
    if (index == 1 && (rc == 1 || ovector[2] == PCRE2_UNSET)) index = 0;
    group->assign(text.data() + ovector[2 * index], ovector[2 * index + 1] - ovector[2 * index]);
  }
  return matched;
}

}  // namespace kiln::internal
