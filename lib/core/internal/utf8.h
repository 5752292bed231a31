// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF),
// which is what protobuf demands of a string field and PCRE2 of a subject in UTF mode.
//
// Internal to Kiln. Thread-safe (pure functions).
#ifndef KILN_LIB_CORE_INTERNAL_UTF8_H_
#define KILN_LIB_CORE_INTERNAL_UTF8_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::internal {

// The length (1 to 4) of the well-formed UTF-8 sequence that starts at s[i], or 0 when none
// does. REQUIRES: i < s.size().
inline size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char c = p[i];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  if (p[i + 1] < lo || p[i + 1] > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if ((p[i + k] & 0xC0) != 0x80) return 0;
  }
  return len;
}

// Whether `s` is well-formed UTF-8.
inline bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

// The first `max_chars` characters of `text` (all of it if it has fewer), as well-formed UTF-8:
// each byte that starts no well-formed sequence counts as one character and becomes U+FFFD.
inline std::string Utf8Prefix(std::string_view text, size_t max_chars) {
  std::string out;
  out.reserve(text.size() < max_chars * 4 ? text.size() : max_chars * 4);
  size_t i = 0;
  for (size_t chars = 0; chars < max_chars && i < text.size(); ++chars) {
    const size_t len = Utf8SequenceLength(text, i);
    if (len == 0) {
      out.append("\xEF\xBF\xBD");  // U+FFFD
      ++i;
    } else {
      out.append(text, i, len);
      i += len;
    }
  }
  return out;
}

}  // namespace kiln::internal

#endif  // KILN_LIB_CORE_INTERNAL_UTF8_H_
