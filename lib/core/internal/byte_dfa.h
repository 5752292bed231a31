// ByteDfa: a deterministic automaton over bytes for the service model's
// simple patterns, so that validating a field costs a table lookup per byte
// instead of a regex engine's call (PCRE2's JIT spends ~500 instructions on
// the set-up of one match of a 20-byte job name; the automaton ~4 per byte).
//
// It decides whole-match of a pattern written in the model's dialect (Java
// regexes) over text that is valid UTF-8, with PCRE2's answers (PCRE2_UTF,
// no PCRE2_UCP: \d, \w, \s and POSIX names are ASCII; `.` is every character
// but a line feed). Supported: literals and escaped punctuation, `.`, \d \D
// \w \W \s \S, classes with ranges, negation and those escapes,
// \p{Alnum|Alpha|Digit|Upper|Lower}, groups (capturing and `(?:`),
// alternation, and the quantifiers * + ? {n} {n,} {n,m}. Anything else
// (anchors, lookaround, backreferences, lazy or possessive quantifiers,
// Unicode properties, non-ASCII literals) is not compiled: the caller keeps
// PCRE2 for that pattern.
//
// Immutable once compiled (thread-safe).
#ifndef KILN_LIB_CORE_INTERNAL_BYTE_DFA_H_
#define KILN_LIB_CORE_INTERNAL_BYTE_DFA_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

namespace kiln::internal {

class ByteDfa {
 public:
  // Compiles `pattern`, or returns null when it uses a construct the
  // automaton does not support or would need more than `max_states` states.
  // `dot_is_all_but_line_feed`: whether `.` may be compiled (PCRE2's newline
  // convention is LF; otherwise `.` is unsupported).
  static std::unique_ptr<ByteDfa> Compile(std::string_view pattern, bool dot_is_all_but_line_feed,
                                          int max_states = 4096);

  // True when the whole of `text` matches. `text` must be valid UTF-8.
  bool Matches(std::string_view text) const {
    uint32_t s = kStart;
    const uint16_t* next = next_.data();
    for (const char c : text) {
      s = next[s * classes_ + byte_class_[static_cast<unsigned char>(c)]];
      if (s == kDead) return false;
    }
    return accepting_[s] != 0;
  }

 private:
  static constexpr uint32_t kDead = 0;
  static constexpr uint32_t kStart = 1;

  ByteDfa() = default;

  std::array<uint8_t, 256> byte_class_{};
  uint32_t classes_ = 0;
  std::vector<uint16_t> next_;      // [state * classes_ + class] -> state
  std::vector<uint8_t> accepting_;  // per state
};

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_BYTE_DFA_H_
