// SeqWindow: things numbered by a creation counter, found by number without
// hashing (the engine's jobs, the sim provider's clusters).
#ifndef KILN_CORE_INTERNAL_SEQ_WINDOW_H_
#define KILN_CORE_INTERNAL_SEQ_WINDOW_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <type_traits>
#include <utility>

namespace kiln::internal {

// Pointers, raw or owning (`Ptr` is T* or std::unique_ptr<T>), to things
// whose seqs ascend as they are added. The index is a window of slots from
// the oldest thing still held: a look-up is an index into it, with no
// hashing, and things added at about the same time sit next to each other. A
// removed thing leaves a hole until every older one is gone too, so one that
// stays keeps the window open behind it: 8 bytes per seq added since. Not
// thread-safe.
template <typename Ptr>
class SeqWindow {
 public:
  using Element = typename std::pointer_traits<Ptr>::element_type;

  // REQUIRES: `seq` is above 0 and above every seq added before; `p` is not
  // null.
  void Add(uint64_t seq, Ptr p) {
    if (slots_.empty()) base_ = seq;
    while (base_ + slots_.size() < seq) slots_.emplace_back();
    slots_.push_back(std::move(p));
  }

  // The thing of `seq`, or null.
  Element* Find(uint64_t seq) const {
    if (seq < base_ || seq - base_ >= slots_.size()) return nullptr;
    return Raw(slots_[seq - base_]);
  }

  // Removes the thing of `seq` and returns its pointer (null if none).
  Ptr Take(uint64_t seq) {
    if (seq < base_ || seq - base_ >= slots_.size()) return Ptr();
    Ptr p = std::move(slots_[seq - base_]);
    slots_[seq - base_] = Ptr();
    while (!slots_.empty() && Raw(slots_.front()) == nullptr) {
      slots_.pop_front();
      ++base_;
    }
    return p;
  }

  // The first thing, in seq order, for which pred(const Element&) is true;
  // null if none.
  template <typename Pred>
  Element* FindFirst(Pred&& pred) const {
    for (const Ptr& p : slots_) {
      if (Raw(p) != nullptr && pred(*Raw(p))) return Raw(p);
    }
    return nullptr;
  }

  // Calls fn(Element&) for each thing held, in seq order. `fn` must not add
  // or remove things.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (const Ptr& p : slots_) {
      if (Raw(p) != nullptr) fn(*Raw(p));
    }
  }

 private:
  static Element* Raw(const Ptr& p) {
    if constexpr (std::is_pointer_v<Ptr>) {
      return p;
    } else {
      return p.get();
    }
  }

  std::deque<Ptr> slots_;  // slots_[i]: the thing of seq base_ + i, or null
  uint64_t base_ = 0;
};

}  // namespace kiln::internal

#endif  // KILN_CORE_INTERNAL_SEQ_WINDOW_H_
