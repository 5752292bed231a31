// SeqWindow: things numbered by a creation counter, found by number without
// hashing (the engine's jobs, the sim provider's clusters).
#ifndef KILN_LIB_BASE_SEQ_WINDOW_H_
#define KILN_LIB_BASE_SEQ_WINDOW_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

namespace kiln::internal {

// Pointers, raw or owning (`Ptr` is T* or std::unique_ptr<T>), to things
// whose seqs ascend as they are added. The index is a window of slots from
// the oldest thing still held: a look-up is an index into it, with no
// hashing, and things added at about the same time sit next to each other. A
// removed thing leaves a hole until every older one is gone too, so one that
// stays keeps the window open behind it: 8 bytes per seq added since. The
// slots are a ring that doubles when full and never shrinks: it keeps room
// for the widest window it has held. Not thread-safe.
template <typename Ptr>
class SeqWindow {
 public:
  using Element = typename std::pointer_traits<Ptr>::element_type;

  // REQUIRES: `seq` is above 0 and above every seq added before; `p` is not
  // null. (Put also takes `seq` in a hole: then Add is Put.)
  void Add(uint64_t seq, Ptr p) {
    if (size_ == 0) {
      base_ = seq;
      head_ = 0;
    }
    if (seq - base_ < size_) {  // a hole (Put)
      At(seq - base_) = std::move(p);
      return;
    }
    while (base_ + size_ < seq) PushBack(Ptr());
    PushBack(std::move(p));
  }

  // Holds `p` as the thing of `seq`, which may be older than things held
  // (the window opens backwards, to `seq`) or fall in a hole. Throws
  // std::bad_alloc, and then nothing has changed.
  // REQUIRES: `seq` is above 0 and holds nothing; `p` is not null.
  void Put(uint64_t seq, Ptr p) {
    if (size_ == 0 || seq >= base_) {
      Add(seq, std::move(p));
      return;
    }
    const size_t before = base_ - seq;  // new slots in front, `seq`'s the first
    while (slots_.size() - size_ < before) Grow();
    head_ = (head_ - before) & (slots_.size() - 1);
    size_ += before;
    base_ = seq;
    At(0) = std::move(p);
  }

  // The thing of `seq`, or null.
  Element* Find(uint64_t seq) const {
    if (seq < base_ || seq - base_ >= size_) return nullptr;
    return Raw(At(seq - base_));
  }

  // Removes the thing of `seq` and returns its pointer (null if none).
  Ptr Take(uint64_t seq) {
    if (seq < base_ || seq - base_ >= size_) return Ptr();
    Ptr& slot = At(seq - base_);
    Ptr p = std::move(slot);
    slot = Ptr();
    while (size_ > 0 && Raw(At(0)) == nullptr) {
      head_ = (head_ + 1) & (slots_.size() - 1);
      --size_;
      ++base_;
    }
    return p;
  }

  // The first thing, in seq order, for which pred(const Element&) is true;
  // null if none.
  template <typename Pred>
  Element* FindFirst(Pred&& pred) const {
    for (size_t i = 0; i < size_; ++i) {
      Element* e = Raw(At(i));
      if (e != nullptr && pred(*e)) return e;
    }
    return nullptr;
  }

  // Calls fn(Element&) for each thing held, in seq order. `fn` must not add
  // or remove things.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    for (size_t i = 0; i < size_; ++i) {
      if (Element* e = Raw(At(i))) fn(*e);
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

  // The slot of the i-th seq of the window (i < size_).
  Ptr& At(size_t i) { return slots_[(head_ + i) & (slots_.size() - 1)]; }
  const Ptr& At(size_t i) const { return slots_[(head_ + i) & (slots_.size() - 1)]; }

  void PushBack(Ptr p) {
    if (size_ == slots_.size()) Grow();
    At(size_) = std::move(p);
    ++size_;
  }

  // Twice the room (at least 16 slots), the window moved to its start. Throws
  // std::bad_alloc, and then nothing has changed.
  void Grow() {
    std::vector<Ptr> bigger(std::max<size_t>(16, 2 * slots_.size()));
    for (size_t i = 0; i < size_; ++i) bigger[i] = std::move(At(i));
    slots_.swap(bigger);
    head_ = 0;
  }

  std::vector<Ptr> slots_;  // a ring; its size is 0 or a power of two
  size_t head_ = 0;         // slots_[head_]: the slot of seq base_
  size_t size_ = 0;         // slots in the window, holes included
  uint64_t base_ = 0;
};

}  // namespace kiln::internal

#endif  // KILN_LIB_BASE_SEQ_WINDOW_H_
