#include "core/internal/byte_dfa.h"

#include <algorithm>
#include <bitset>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::internal {
namespace {

// A set of characters of valid UTF-8 text: some ASCII characters, and
// either every non-ASCII character or none (the only sets the supported
// syntax can write without Unicode properties).
struct CharSet {
  std::bitset<128> ascii;
  bool non_ascii = false;

  void Add(unsigned char c) { ascii.set(c); }
  void AddRange(unsigned char lo, unsigned char hi) {
    for (unsigned c = lo; c <= hi; ++c) ascii.set(c);
  }
  void Merge(const CharSet& other) {
    ascii |= other.ascii;
    non_ascii = non_ascii || other.non_ascii;
  }
  CharSet Negated() const {
    CharSet n;
    n.ascii = ~ascii;
    n.non_ascii = !non_ascii;
    return n;
  }
};

// The pattern's syntax tree.
struct Node {
  enum class Kind { kSet, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kConcat;
  CharSet set;             // kSet
  std::vector<int> kids;   // kConcat, kAlt; kRepeat: the repeated node
  int min = 0, max = 0;    // kRepeat; max < 0: unbounded
};

// Quantifier counts above this are not compiled: the automaton would be
// large ([\S]{1,2048} needs thousands of states), and finding that out by
// building it costs more than PCRE2 ever will.
constexpr int kMaxCount = 255;

class Parser {
 public:
  Parser(std::string_view text, bool dot_ok) : text_(text), dot_ok_(dot_ok) {}

  // The root node, or nullopt for an unsupported or malformed pattern.
  std::optional<int> Parse() {
    const int root = ParseAlt();
    if (failed_ || pos_ != text_.size()) return std::nullopt;
    return root;
  }
  std::vector<Node>& nodes() { return nodes_; }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }
  int Fail() {
    failed_ = true;
    pos_ = text_.size();
    return 0;
  }
  int Add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size()) - 1;
  }
  int AddSet(const CharSet& s) {
    Node n;
    n.kind = Node::Kind::kSet;
    n.set = s;
    return Add(std::move(n));
  }

  int ParseAlt() {
    Node alt;
    alt.kind = Node::Kind::kAlt;
    alt.kids.push_back(ParseConcat());
    while (!failed_ && !AtEnd() && Peek() == '|') {
      ++pos_;
      alt.kids.push_back(ParseConcat());
    }
    if (alt.kids.size() == 1) return alt.kids[0];
    return Add(std::move(alt));
  }

  int ParseConcat() {
    Node concat;
    concat.kind = Node::Kind::kConcat;
    while (!failed_ && !AtEnd() && Peek() != '|' && Peek() != ')') {
      concat.kids.push_back(ParseRepeat());
    }
    return Add(std::move(concat));
  }

  int ParseRepeat() {
    int atom = ParseAtom();
    while (!failed_ && !AtEnd()) {
      int min = 0, max = 0;
      const char c = Peek();
      if (c == '*') {
        min = 0, max = -1, ++pos_;
      } else if (c == '+') {
        min = 1, max = -1, ++pos_;
      } else if (c == '?') {
        min = 0, max = 1, ++pos_;
      } else if (c == '{') {
        if (!ParseCounts(&min, &max)) return Fail();
      } else {
        break;
      }
      // Lazy and possessive forms are left to PCRE2.
      if (!AtEnd() && (Peek() == '?' || Peek() == '+')) return Fail();
      Node r;
      r.kind = Node::Kind::kRepeat;
      r.kids.push_back(atom);
      r.min = min;
      r.max = max;
      atom = Add(std::move(r));
    }
    return atom;
  }

  // {n}, {n,} or {n,m} at pos_.
  bool ParseCounts(int* min, int* max) {
    ++pos_;  // '{'
    auto number = [&](int* out) {
      const size_t start = pos_;
      long value = 0;
      while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
        value = value * 10 + (Peek() - '0');
        if (value > kMaxCount) return false;
        ++pos_;
      }
      *out = static_cast<int>(value);
      return pos_ > start;
    };
    if (!number(min)) return false;
    if (AtEnd()) return false;
    if (Peek() == '}') {
      *max = *min;
    } else {
      if (Peek() != ',') return false;
      ++pos_;
      if (!AtEnd() && Peek() == '}') {
        *max = -1;
      } else if (!number(max) || *max < *min) {
        return false;
      }
    }
    if (AtEnd() || Peek() != '}') return false;
    ++pos_;
    return true;
  }

  int ParseAtom() {
    const char c = Peek();
    if (static_cast<unsigned char>(c) >= 0x80) return Fail();
    switch (c) {
      case '(': {
        ++pos_;
        if (!AtEnd() && Peek() == '?') {
          if (pos_ + 1 < text_.size() && text_[pos_ + 1] == ':') {
            pos_ += 2;
          } else {
            return Fail();  // lookaround, named groups, options
          }
        }
        const int inner = ParseAlt();
        if (failed_ || AtEnd() || Peek() != ')') return Fail();
        ++pos_;
        return inner;
      }
      case '[':
        return ParseClass();
      case '.': {
        if (!dot_ok_) return Fail();
        ++pos_;
        CharSet s;
        s.ascii.set();
        s.ascii.reset('\n');
        s.non_ascii = true;
        return AddSet(s);
      }
      case '\\': {
        CharSet s;
        if (!ParseEscape(&s, nullptr)) return Fail();
        return AddSet(s);
      }
      case '^':
      case '$':
      case '*':
      case '+':
      case '?':
      case '{':
      case ')':
        return Fail();
      default: {
        ++pos_;
        CharSet s;
        s.Add(static_cast<unsigned char>(c));
        return AddSet(s);
      }
    }
  }

  // An escape at pos_ ('\\'): a class of characters, or one character
  // (then `*single` is set when not null). False when unsupported.
  bool ParseEscape(CharSet* set, int* single) {
    ++pos_;
    if (AtEnd()) return false;
    const char e = Peek();
    ++pos_;
    auto one = [&](unsigned char ch) {
      set->Add(ch);
      if (single != nullptr) *single = ch;
      return true;
    };
    CharSet cls;
    switch (e) {
      case 'd':
      case 'D':
        cls.AddRange('0', '9');
        break;
      case 'w':
      case 'W':
        cls.AddRange('a', 'z');
        cls.AddRange('A', 'Z');
        cls.AddRange('0', '9');
        cls.Add('_');
        break;
      case 's':
      case 'S':
        for (unsigned char ch : {' ', '\t', '\n', '\v', '\f', '\r'}) cls.Add(ch);
        break;
      case 'p':
        if (!ParsePosixName(&cls)) return false;
        break;
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      default:
        // Escaped punctuation is the character; an escaped letter or digit
        // is something else (\b, \A, \1, \x...): left to PCRE2.
        if (static_cast<unsigned char>(e) >= 0x80) return false;
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
          return false;
        }
        return one(static_cast<unsigned char>(e));
    }
    if (e == 'D' || e == 'W' || e == 'S') cls = cls.Negated();
    set->Merge(cls);
    return true;
  }

  // \p{Name} after the 'p': Java's ASCII POSIX names only.
  bool ParsePosixName(CharSet* cls) {
    if (AtEnd() || Peek() != '{') return false;
    const size_t close = text_.find('}', pos_);
    if (close == std::string_view::npos) return false;
    const std::string_view name = text_.substr(pos_ + 1, close - pos_ - 1);
    pos_ = close + 1;
    if (name == "Digit") {
      cls->AddRange('0', '9');
    } else if (name == "Upper") {
      cls->AddRange('A', 'Z');
    } else if (name == "Lower") {
      cls->AddRange('a', 'z');
    } else if (name == "Alpha") {
      cls->AddRange('a', 'z');
      cls->AddRange('A', 'Z');
    } else if (name == "Alnum") {
      cls->AddRange('a', 'z');
      cls->AddRange('A', 'Z');
      cls->AddRange('0', '9');
    } else {
      return false;  // Unicode properties (\p{L}...)
    }
    return true;
  }

  int ParseClass() {
    ++pos_;  // '['
    CharSet set;
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++pos_;
    }
    bool first = true;
    for (;;) {
      if (AtEnd()) return Fail();
      const char c = Peek();
      if (static_cast<unsigned char>(c) >= 0x80) return Fail();
      if (c == ']' && !first) {
        ++pos_;
        break;
      }
      first = false;
      int lo = -1;  // a single character that may start a range
      if (c == '\\') {
        if (!ParseEscape(&set, &lo)) return Fail();
        // PCRE2 refuses a range from a class escape ([\w-x]).
        if (lo < 0 && pos_ + 1 < text_.size() && Peek() == '-' && text_[pos_ + 1] != ']') {
          return Fail();
        }
      } else if (c == '[') {
        // POSIX brackets ([:alpha:]) and the like are left to PCRE2.
        if (pos_ + 1 < text_.size() &&
            (text_[pos_ + 1] == ':' || text_[pos_ + 1] == '.' || text_[pos_ + 1] == '=')) {
          return Fail();
        }
        ++pos_;
        lo = '[';
        set.Add('[');
      } else {
        ++pos_;
        lo = static_cast<unsigned char>(c);
        set.Add(static_cast<unsigned char>(c));
      }
      // A range: a character, '-', and a character that is not the closing
      // bracket.
      if (lo >= 0 && pos_ + 1 < text_.size() && Peek() == '-' && text_[pos_ + 1] != ']') {
        ++pos_;  // '-'
        int hi = -1;
        const char d = Peek();
        if (static_cast<unsigned char>(d) >= 0x80) return Fail();
        if (d == '\\') {
          CharSet ignored;
          if (!ParseEscape(&ignored, &hi) || hi < 0) return Fail();
        } else if (d == '[') {
          return Fail();
        } else {
          ++pos_;
          hi = static_cast<unsigned char>(d);
        }
        if (hi < lo) return Fail();
        set.AddRange(static_cast<unsigned char>(lo), static_cast<unsigned char>(hi));
      }
    }
    return AddSet(negate ? set.Negated() : set);
  }

  std::string_view text_;
  bool dot_ok_;
  size_t pos_ = 0;
  bool failed_ = false;
  std::vector<Node> nodes_;
};

// A Thompson automaton: byte states read one byte of their set; epsilon
// states move without reading; one state accepts.
struct Nfa {
  struct State {
    bool reads = false;
    std::bitset<256> bytes;  // reads
    int out = -1;            // reads: the next state; epsilon: the first
    int out2 = -1;           // epsilon: the second, if any
  };
  std::vector<State> states;
  int match = -1;

  static constexpr size_t kMaxStates = 60000;

  int New() {
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }
  int Reads(const std::bitset<256>& bytes, int out) {
    const int s = New();
    states[s].reads = true;
    states[s].bytes = bytes;
    states[s].out = out;
    return s;
  }
  int Epsilon(int out, int out2 = -1) {
    const int s = New();
    states[s].out = out;
    states[s].out2 = out2;
    return s;
  }
  bool TooBig() const { return states.size() > kMaxStates; }

  // The states that match `node` and then go on to `next`; returns the
  // first. -1 when the automaton grows too big.
  int Emit(const std::vector<Node>& nodes, int node, int next) {
    if (TooBig()) return -1;
    const Node& n = nodes[node];
    switch (n.kind) {
      case Node::Kind::kSet: {
        std::bitset<256> ascii;
        for (int c = 0; c < 128; ++c) ascii[c] = n.set.ascii[c];
        if (!n.set.non_ascii) return Reads(ascii, next);
        // A non-ASCII character of valid UTF-8: a lead byte, then its
        // continuation bytes. Nothing else reads continuation bytes, so the
        // loop ends exactly where the character does.
        std::bitset<256> lead, cont;
        for (int b = 0xC0; b < 0x100; ++b) lead.set(b);
        for (int b = 0x80; b < 0xC0; ++b) cont.set(b);
        const int after_lead = Epsilon(-1);
        const int continued = Reads(cont, after_lead);
        states[after_lead].out = continued;
        states[after_lead].out2 = next;
        const int a = Reads(ascii, next);
        const int l = Reads(lead, after_lead);
        return Epsilon(a, l);
      }
      case Node::Kind::kConcat: {
        int at = next;
        for (auto it = n.kids.rbegin(); it != n.kids.rend() && at >= 0; ++it) {
          at = Emit(nodes, *it, at);
        }
        return at;
      }
      case Node::Kind::kAlt: {
        // A chain of two-way splits, one per alternative.
        int at = -1;
        for (auto it = n.kids.rbegin(); it != n.kids.rend(); ++it) {
          const int s = Emit(nodes, *it, next);
          if (s < 0) return -1;
          at = at < 0 ? s : Epsilon(s, at);
        }
        return at;
      }
      case Node::Kind::kRepeat: {
        int at = next;
        if (n.max < 0) {
          const int loop = Epsilon(-1);
          const int body = Emit(nodes, n.kids[0], loop);
          if (body < 0) return -1;
          states[loop].out = body;
          states[loop].out2 = next;
          at = loop;
        } else {
          // X{0,k} as (X(X(...)?)?)?: each optional copy may end the run.
          for (int i = n.min; i < n.max; ++i) {
            const int body = Emit(nodes, n.kids[0], at);
            if (body < 0) return -1;
            at = Epsilon(body, next);
          }
        }
        for (int i = 0; i < n.min && at >= 0; ++i) at = Emit(nodes, n.kids[0], at);
        return at;
      }
    }
    return -1;
  }
};

}  // namespace

std::unique_ptr<ByteDfa> ByteDfa::Compile(std::string_view pattern, bool dot_is_all_but_line_feed,
                                          int max_states) {
  Parser parser(pattern, dot_is_all_but_line_feed);
  const std::optional<int> root = parser.Parse();
  if (!root.has_value()) return nullptr;
  Nfa nfa;
  nfa.match = nfa.New();
  const int start = nfa.Emit(parser.nodes(), *root, nfa.match);
  if (start < 0 || nfa.TooBig()) return nullptr;

  // Bytes that every set treats alike share a class.
  std::unique_ptr<ByteDfa> dfa(new ByteDfa());
  {
    std::map<std::vector<bool>, int> by_signature;
    std::vector<const std::bitset<256>*> sets;  // distinct ones: a few
    for (const Nfa::State& s : nfa.states) {
      if (!s.reads) continue;
      bool seen = false;
      for (const std::bitset<256>* known : sets) seen = seen || *known == s.bytes;
      if (!seen) sets.push_back(&s.bytes);
    }
    for (int b = 0; b < 256; ++b) {
      std::vector<bool> signature(sets.size());
      for (size_t i = 0; i < sets.size(); ++i) signature[i] = (*sets[i])[b];
      auto [it, inserted] = by_signature.emplace(std::move(signature), by_signature.size());
      dfa->byte_class_[b] = static_cast<uint8_t>(it->second);
      if (by_signature.size() > 256) return nullptr;
    }
    dfa->classes_ = static_cast<uint32_t>(by_signature.size());
  }
  std::vector<int> representative(dfa->classes_, -1);
  for (int b = 255; b >= 0; --b) representative[dfa->byte_class_[b]] = b;

  // Subset construction. A DFA state is the sorted set of byte-reading and
  // accepting NFA states reachable without reading.
  std::vector<uint32_t> mark(nfa.states.size(), 0);
  uint32_t stamp = 0;
  std::vector<int> stack;
  auto closure = [&](const std::vector<int>& from) {
    ++stamp;
    stack.assign(from.begin(), from.end());
    std::vector<int> out;
    while (!stack.empty()) {
      const int s = stack.back();
      stack.pop_back();
      if (mark[s] == stamp) continue;
      mark[s] = stamp;
      const Nfa::State& st = nfa.states[s];
      if (st.reads || s == nfa.match) {
        out.push_back(s);
      } else {
        if (st.out >= 0) stack.push_back(st.out);
        if (st.out2 >= 0) stack.push_back(st.out2);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  std::map<std::vector<int>, uint32_t> ids;
  std::vector<std::vector<int>> sets;
  sets.emplace_back();  // kDead
  dfa->accepting_.push_back(0);
  dfa->next_.assign(dfa->classes_, kDead);
  auto intern = [&](std::vector<int> set) -> std::optional<uint32_t> {
    if (set.empty()) return kDead;
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    if (static_cast<int>(sets.size()) >= max_states || sets.size() >= 0xFFFF) return std::nullopt;
    const uint32_t id = static_cast<uint32_t>(sets.size());
    ids.emplace(set, id);
    dfa->accepting_.push_back(std::binary_search(set.begin(), set.end(), nfa.match) ? 1 : 0);
    dfa->next_.resize(dfa->next_.size() + dfa->classes_, kDead);
    sets.push_back(std::move(set));
    return id;
  };
  if (intern(closure({start})) != std::optional<uint32_t>(kStart)) return nullptr;
  std::vector<int> moved;
  for (uint32_t id = kStart; id < sets.size(); ++id) {
    for (uint32_t c = 0; c < dfa->classes_; ++c) {
      const int byte = representative[c];
      moved.clear();
      for (int s : sets[id]) {
        const Nfa::State& st = nfa.states[s];
        if (st.reads && st.bytes[byte]) moved.push_back(st.out);
      }
      const std::optional<uint32_t> to = intern(closure(moved));
      if (!to.has_value()) return nullptr;
      dfa->next_[id * dfa->classes_ + c] = static_cast<uint16_t>(*to);
    }
  }
  return dfa;
}

}  // namespace kiln::internal
