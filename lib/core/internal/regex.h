// A compiled regular expression (PCRE2 in UTF mode). Kiln needs the service's
// Java-flavoured patterns (\p{L} classes, look-behind) for validation and
// PCRE-style metric regexes (lazy quantifiers) for MetricDefinitions; neither
// std::regex nor RE2 reads both. Immutable once compiled; thread-safe.
#ifndef KILN_LIB_CORE_INTERNAL_REGEX_H_
#define KILN_LIB_CORE_INTERNAL_REGEX_H_

#include <memory>
#include <string>
#include <string_view>

namespace kiln::internal {

class Regex {
 public:
  enum class Mode {
    kFullMatch,  // the whole subject must match (the model's patterns)
    kSearch,     // a match anywhere (metric regexes)
  };

  // Compiles `pattern`. Java's ASCII POSIX classes (\p{Alnum}, ...) are
  // translated to PCRE2's. Returns nullptr and sets `*error` (when non-null)
  // to PCRE2's message and offset if the pattern is invalid.
  static std::unique_ptr<Regex> Compile(std::string_view pattern, Mode mode, std::string* error);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // kFullMatch: true when the whole of `text` matches. kSearch: true when a
  // match exists anywhere. Invalid UTF-8 never matches.
  bool Matches(std::string_view text) const;

  // Matches, for text the caller has already found to be well-formed UTF-8:
  // PCRE2's own check of the subject is skipped (and its JIT entered
  // directly), which is most of the cost of matching a short value.
  // REQUIRES: `text` is well-formed UTF-8 (no overlong forms, no surrogates,
  // nothing above U+10FFFF).
  bool MatchesValidUtf8(std::string_view text) const;

  // kSearch: finds the first match; on success sets `*group` to the first
  // capture group (or the whole match when the pattern has no group).
  bool Search(std::string_view text, std::string* group) const;

  const std::string& text() const { return text_; }

 private:
  Regex() = default;
  std::string text_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;      // JIT-compiled: pcre2_jit_match may be used
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_REGEX_H_
