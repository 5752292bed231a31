// The virtual and real-time event loops (kiln/event_loop.h).
//
// One class template serves both kinds and every queue:
//   EventLoopImpl<LadderEventQueue, kVirtual>, EventLoopImpl<HeapEventQueue, kVirtual>: the
//     shipped queues, called without virtual dispatch;
//   EventLoopImpl<EventQueue, kVirtual>: any other queue a user plugs in.
//
// Data structures (all loop thread only, except the inbox block):
//   * slot table: callbacks live in fixed-size chunks of slots that never move (a running
//     callback is invoked in place while it may schedule more, which may add chunks), with a
//     LIFO free list. Past 2 MiB the chunks come in 2 MiB blocks on transparent huge pages
//     (where the OS gives them on request): events run in time order, which is a random
//     order of slots, and on 4 KiB pages a large table misses the TLB on most of them. A
//     slot is one cache line (CallbackSlot in kiln/event_loop.h) that holds a callable of up to
//     40 bytes itself: most events cost no allocation, and a trivially destructible
//     callable no destructor call. Each slot has a generation; an event's queue
//     entry and its TimerHandle carry the generation the slot had when the event was
//     scheduled. The generation is bumped when the event starts running or is cancelled, so
//     stale handles and dead entries are told apart in O(1). A cancelled slot is only freed
//     when its dead entry leaves the queue, so a dead entry can never be mistaken for a later
//     event in the same slot.
//   * queue: one QueuedEvent per scheduled event, live or dead.
//   * inbox: posts from any thread, under `mu_`; the loop thread moves them into the queue
//     (time = now, next seq) before taking each event, which is what orders posts with timers.
//
// Hot path of a virtual loop, per event: one relaxed atomic load (stop and inbox flags), Top(),
// one slot read, the callback invoked in place, its destructor, free-list push, and Pop() -- or,
// when the callback schedules (the common case), ReplaceTop() instead of Pop() + Push(): the
// running event's entry stays at the top of the queue while its callback runs (anything it
// schedules orders after it), and the first event it schedules takes that entry's place.
// When the queue knows what comes next (the heap on large heaps: the next event; the ladder:
// the event six ahead in its lane, which it keeps that long), that event's slot is prefetched
// while the current callback runs. A callback scheduled with a lambda (or any callable) is
// constructed in its slot (EventLoop::Reserve*, then Emplace), not moved there from a temporary
// Callback.
// Cancel() marks the event dead before it destroys the callable in place, and no compaction
// frees a slot while its callable is being destroyed.
//
// Destruction: members go in reverse order, so posts in the inbox, then pending callbacks in
// the slot table, are destroyed unrun before the queue.
#include "kiln/event_loop.h"

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "core/internal/heap_event_queue.h"
#include "core/internal/huge_pages.h"
#include "core/internal/ladder_event_queue.h"
#include "core/internal/real_clock.h"
#include "kiln/clock.h"
#include "kiln/event_queue.h"

namespace kiln {
namespace {

using internal::HeapEventQueue;
using internal::LadderEventQueue;
using internal::RealClock;
using Callback = EventLoop::Callback;

constexpr int64_t kMaxNs = std::numeric_limits<int64_t>::max();
constexpr int64_t kMinNs = std::numeric_limits<int64_t>::min();

// Saturates absl's infinities (and anything outside int64 nanoseconds) into the range.
int64_t ToUnixNs(absl::Time t) {
  if (t == absl::InfiniteFuture()) return kMaxNs;
  if (t == absl::InfinitePast()) return kMinNs;
  return absl::ToUnixNanos(t);  // finite times saturate too
}

// absl::ToInt64Nanoseconds(d), with the fast path that newer Abseil releases inline (Debian's
// 20220623 calls into the library for every conversion): a non-negative duration below 2^33 s
// is hi seconds and lo quarter-nanosecond ticks.
int64_t ToInt64Ns(absl::Duration d) {
  const int64_t hi = absl::time_internal::GetRepHi(d);
  if (hi >= 0 && (hi >> 33) == 0) {
    return hi * 1'000'000'000 + absl::time_internal::GetRepLo(d) / 4;
  }
  return absl::ToInt64Nanoseconds(d);
}

// Generations are odd (a slot's starts at 1), so they never reach 0, which marks invalid
// handles, and stepping one is a single add.
uint32_t NextGeneration(uint32_t g) { return g + 2; }

// The callback table. Slots live in chunks that never move.
class SlotTable {
 public:
  static constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

  // A slot is free, or holds a pending event, the running one, or a cancelled event whose
  // entry is still in the queue. `link` tells which: a free slot's link is the next free slot
  // (or kNone); the others hold one of these codes, which no slot index reaches (AllocateNew).
  enum class State : uint32_t {
    kPending = kNone - 1,
    kRunning = kNone - 2,
    kDead = kNone - 3,
  };
  static constexpr uint32_t kMaxSlots = kNone - 3;

  // One cache line (kiln/event_loop.h): the callable, and in the words the slot leaves to its
  // owner, the slot's generation and `link`.
  using Slot = CallbackSlot;
  static uint32_t& Generation(Slot& s) { return s.owner_words[0]; }
  static uint32_t Generation(const Slot& s) { return s.owner_words[0]; }
  static uint32_t& Link(Slot& s) { return s.owner_words[1]; }
  static uint32_t Link(const Slot& s) { return s.owner_words[1]; }

  static void SetState(Slot& s, State state) { Link(s) = static_cast<uint32_t>(state); }
  static bool Holds(const Slot& s, State state) { return Link(s) == static_cast<uint32_t>(state); }

  SlotTable() = default;
  SlotTable(const SlotTable&) = delete;
  SlotTable& operator=(const SlotTable&) = delete;

  ~SlotTable() {
    for (uint32_t i = 0; i < used_; ++i) {
      Slot& s = at(i);
      if (Holds(s, State::kPending) || Holds(s, State::kRunning)) s.Destroy();
    }
    static_assert(std::is_trivially_destructible_v<Slot>);
    for (const Block& b : blocks_) {
      if (b.huge) {
        internal::FreeHugePages(b.memory, internal::kHugePageBytes);  // (AddChunks)
      } else {
        ::operator delete(b.memory, std::align_val_t(alignof(Slot)));
      }
    }
  }

  Slot& at(uint32_t i) { return chunks_[i >> kChunkBits][i & kChunkMask]; }
  const Slot& at(uint32_t i) const { return chunks_[i >> kChunkBits][i & kChunkMask]; }

  // Number of slots ever handed out; valid indices are below it.
  uint32_t used() const { return used_; }

  // Returns a free slot and its index.
  [[gnu::always_inline]] std::pair<uint32_t, Slot*> Allocate() {
    if (free_head_ != kNone) [[likely]] {
      const uint32_t i = free_head_;
      Slot* const s = &at(i);
      free_head_ = Link(*s);
      return {i, s};
    }
    const uint32_t i = AllocateNew();
    return {i, &at(i)};
  }

  // REQUIRES: the slot's callback is destroyed.
  void Free(uint32_t i, Slot& s) {
    Link(s) = free_head_;
    free_head_ = i;
  }

 private:
  // Allocate()'s rare path, kept out of line so that the common one inlines into its callers.
  [[gnu::noinline]] uint32_t AllocateNew() {
    if (used_ == kMaxSlots) {
      std::fprintf(stderr, "kiln::EventLoop: more than %u events pending\n", kMaxSlots);
      std::abort();
    }
    if (used_ == (static_cast<uint64_t>(chunks_.size()) << kChunkBits)) AddChunks();
    return used_++;
  }

  // Adds a chunk; past the first kSmallChunks, a huge page's worth of chunks at once.
  void AddChunks() {
    // A large table is read at random slots (in due-time order, not in slot order).
    const bool huge = chunks_.size() >= kSmallChunks;
    const size_t count = huge ? kChunksPerHugePage : 1;
    const size_t bytes = count * kChunkSize * sizeof(Slot);
    blocks_.reserve(blocks_.size() + 1);  // nothing below throws once the memory is taken
    chunks_.reserve(chunks_.size() + count);
    void* memory = huge ? internal::AllocateHugePages(bytes)
                        : ::operator new(bytes, std::align_val_t(alignof(Slot)));
    blocks_.push_back(Block{memory, huge});
    Slot* const slots = static_cast<Slot*>(memory);
    for (size_t i = 0; i < count * kChunkSize; ++i) {
      Generation(*::new (static_cast<void*>(slots + i)) Slot()) = 1;  // odd: steps by 2
    }
    for (size_t c = 0; c < count; ++c) chunks_.push_back(slots + c * kChunkSize);
  }

  static constexpr uint32_t kChunkBits = 12;
  static constexpr uint32_t kChunkSize = uint32_t{1} << kChunkBits;
  static constexpr uint32_t kChunkMask = kChunkSize - 1;
  // The first chunks one by one (256 KiB each), then 2 MiB blocks of 8, huge-page aligned.
  static constexpr size_t kSmallChunks = 8;
  static constexpr size_t kChunksPerHugePage =
      internal::kHugePageBytes / (kChunkSize * sizeof(Slot));
  static_assert(kChunksPerHugePage * kChunkSize * sizeof(Slot) == internal::kHugePageBytes);

  // Memory the chunks live in, as allocated.
  struct Block {
    void* memory;
    bool huge;  // from AllocateHugePages
  };
  std::vector<Block> blocks_;
  std::vector<Slot*> chunks_;  // into blocks_
  uint32_t used_ = 0;
  uint32_t free_head_ = kNone;
};

using Slot = SlotTable::Slot;
using State = SlotTable::State;

// A virtual loop's clock, as a Clock.
class LoopClock final : public Clock {
 public:
  explicit LoopClock(const std::atomic<int64_t>& now_ns) : now_ns_(now_ns) {}
  absl::Time Now() const override {
    return absl::FromUnixNanos(now_ns_.load(std::memory_order_relaxed));
  }

 private:
  const std::atomic<int64_t>& now_ns_;
};

enum class RunMode { kUntilIdle, kUntilDeadline, kForever };

// While it lives, the calling thread's timer slack is 1 ns instead of Linux's default 50 us:
// the kernel may otherwise fire a timed wait that much late to batch wake-ups, which adds
// directly to every timer's lateness. The previous value is restored on destruction, so the
// caller's thread is left as it was. A no-op elsewhere than Linux.
class TightTimerSlack {
 public:
  TightTimerSlack() {
#if defined(__linux__)
    const int previous = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (previous > 1 && prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0) == 0) previous_ = previous;
#endif
  }
  ~TightTimerSlack() {
#if defined(__linux__)
    if (previous_ > 0) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(previous_), 0, 0, 0);
#endif
  }
  TightTimerSlack(const TightTimerSlack&) = delete;
  TightTimerSlack& operator=(const TightTimerSlack&) = delete;

 private:
  int previous_ = 0;  // 0: nothing to restore
};

// Nothing to do for a virtual loop, which never waits on a timer.
struct NoTimerSlack {};

// Rebuild the queue when dead entries outnumber live ones by this much.
constexpr size_t kCompactSlack = 1024;

template <class Queue, bool kVirtual>
class EventLoopImpl final : public EventLoop {
 public:
  // `spin_ns`: EventLoopOptions::spin_before_due in nanoseconds, 0 for none (kMaxNs: always).
  EventLoopImpl(std::unique_ptr<EventQueue> owned_queue, Queue* queue, absl::Time start_time,
                int64_t spin_ns)
      : owned_queue_(std::move(owned_queue)),
        queue_(queue),
        spin_ns_(spin_ns),
        now_ns_(ToUnixNs(start_time)),
        loop_clock_(now_ns_) {}

  absl::Time Now() const override { return absl::FromUnixNanos(NowNs()); }
  bool is_virtual() const override { return kVirtual; }
  const Clock& clock() const override {
    if constexpr (kVirtual) {
      return loop_clock_;
    } else {
      return real_clock_;
    }
  }

  Reservation ReserveAt(absl::Time when) override {
    int64_t t = ToUnixNs(when);
    const int64_t now = NowNs();
    if (t < now) t = now;
    return Reserve(t);
  }

  Reservation ReserveAfter(absl::Duration delay) override {
    const int64_t now = NowNs();
    int64_t t;
    if (delay <= absl::ZeroDuration()) {
      t = now;
    } else if (__builtin_add_overflow(now, ToInt64Ns(delay), &t)) {
      t = kMaxNs;  // ToInt64Ns saturates an infinite delay; the sum saturates here
    }
    return Reserve(t);
  }

  void AbandonReservation(TimerHandle h) override {
    Slot& s = slots_.at(HandleSlot(h));
    Kill(s);
    MaybeCompact();
  }

  bool Cancel(TimerHandle h) override {
    const uint32_t i = HandleSlot(h);
    const uint32_t generation = HandleGeneration(h);
    if (generation == 0 || i >= slots_.used()) return false;
    Slot& s = slots_.at(i);
    // The generation changes when the event starts running or is cancelled, so a match means
    // the event is pending.
    if (SlotTable::Generation(s) != generation || !SlotTable::Holds(s, State::kPending)) {
      return false;
    }
    // The event is dead before its callback is destroyed, so that the destructor (which may
    // use the loop) finds the loop consistent; the slot stays out of reach meanwhile.
    Kill(s);
    ++destroying_;
    s.Destroy();
    --destroying_;
    MaybeCompact();
    return true;
  }

  void Post(Callback cb) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      inbox_.push_back(std::move(cb));
      attention_.fetch_or(kInboxBit, std::memory_order_relaxed);
    }
    cv_.notify_one();
  }

  WorkGuard AcquireWork() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++work_count_;
    return MakeWorkGuard();
  }

  void DoRunUntilIdle() override { RunLoop<RunMode::kUntilIdle>(kMaxNs); }
  void DoRunUntil(absl::Time deadline) override {
    RunLoop<RunMode::kUntilDeadline>(ToUnixNs(deadline));
  }
  void DoRun() override { RunLoop<RunMode::kForever>(kMaxNs); }

  void Stop() override {
    attention_.fetch_or(kStopBit, std::memory_order_relaxed);
    // Taking the mutex orders the store before a waiter's check under it: no lost wake-up.
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }

  size_t pending_events() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return live_ + inbox_.size();
  }

  uint64_t executed_events() const override { return executed_; }

 private:
  void ReleaseWork() override {
    bool idle;
    {
      std::lock_guard<std::mutex> lock(mu_);
      idle = --work_count_ == 0;
    }
    if (idle) cv_.notify_all();
  }

  bool StopRequested() const {
    return (attention_.load(std::memory_order_relaxed) & kStopBit) != 0;
  }

  int64_t NowNs() const {
    if constexpr (kVirtual) {
      return now_ns_.load(std::memory_order_relaxed);
    } else {
      return real_clock_.NowNs();
    }
  }

  // Marks the pending event of slot `s`, whose callback is destroyed (or was never made),
  // cancelled: its entry stays in the queue, dead, until it reaches the top.
  void Kill(Slot& s) {
    SlotTable::Generation(s) = NextGeneration(SlotTable::Generation(s));
    SlotTable::SetState(s, State::kDead);  // freed when its entry leaves the queue
    --live_;
    ++dead_;
  }

  // Rebuilds the queue once dead entries outnumber live ones by kCompactSlack, unless the top
  // entry is the running event's or a cancelled callback is being destroyed (its dead slot
  // must not be freed, and reused, under it).
  void MaybeCompact() {
    if (dead_ > live_ + kCompactSlack && !top_running_ && destroying_ == 0) Compact();
  }

  // Queues an event at `t` in a new slot, whose callback the caller constructs at once; returns
  // the slot's callback storage and the event's handle. Inlined into each caller (ReserveAfter's
  // above all): a call would cost as much as its body.
  [[gnu::always_inline]] Reservation Reserve(int64_t t) {
    const auto [i, slot] = slots_.Allocate();
    Slot& s = *slot;
    SlotTable::SetState(s, State::kPending);
    const uint32_t generation = SlotTable::Generation(s);
    const QueuedEvent e{t, next_seq_++, i, generation};
    if (top_running_) {
      top_running_ = false;
      queue_->ReplaceTop(e);
    } else {
      queue_->Push(e);
    }
    ++live_;
    return {&s, MakeHandle(i, generation)};
  }

  // Moves the inbox into the queue at the loop's time, in posting order.
  void DrainInbox() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      draining_.swap(inbox_);
      attention_.fetch_and(~kInboxBit, std::memory_order_relaxed);
    }
    const int64_t now = NowNs();
    for (Callback& cb : draining_) Reserve(now).callback->Construct(std::move(cb));
    draining_.clear();
  }

  // Pops the top entry, which is dead, and frees its slot.
  void PopDead(uint32_t i, Slot& s) {
    queue_->Pop();
    slots_.Free(i, s);
    --dead_;
  }

  // Rebuilds the queue without its dead entries. O(n log n); runs when dead entries outnumber
  // live ones, so O(log n) amortized per Cancel.
  // REQUIRES: !top_running_.
  void Compact() {
    std::vector<QueuedEvent> keep;
    keep.reserve(live_);
    while (!queue_->Empty()) {
      const QueuedEvent e = queue_->Top();
      queue_->Pop();
      Slot& s = slots_.at(e.slot);
      if (SlotTable::Generation(s) == e.generation) {
        keep.push_back(e);
      } else {
        slots_.Free(e.slot, s);
      }
    }
    dead_ = 0;
    // In order, each push is O(1): both shipped queues append them all to a sorted lane.
    for (const QueuedEvent& e : keep) queue_->Push(e);
  }

  // Waits (real time) until `until_ns` on the loop's clock, a post, or Stop(). A virtual loop
  // only ever waits with until_ns == kMaxNs. A real-time loop with spin_ns_ busy-waits the last
  // spin_ns_ (and may return early, as after a spurious wake-up: the caller loops).
  void Wait(int64_t until_ns) {
    if constexpr (!kVirtual) {
      if (spin_ns_ > 0 && until_ns != kMaxNs) {
        // (until_ns is ahead of the clock, and both are Unix times: no overflow.)
        if (until_ns - real_clock_.NowNs() <= spin_ns_) {
          SpinUntil(until_ns);
          return;
        }
        until_ns -= spin_ns_;  // sleep until the spin begins
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (!inbox_.empty() || StopRequested()) return;
    if constexpr (kVirtual) {
      cv_.wait(lock);
    } else {
      if (until_ns == kMaxNs) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, real_clock_.ToSteady(until_ns));
      }
    }
  }

  // Reads the clock until `until_ns`, a post or Stop(), whichever comes first.
  void SpinUntil(int64_t until_ns) {
    while (attention_.load(std::memory_order_relaxed) == 0 && real_clock_.NowNs() < until_ns) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();  // spin-wait hint: yields the core's pipeline to a sibling thread
#endif
    }
  }

  // With no timer left: waits until a post arrives, Stop() is called (returns true: keep
  // looping) or no work guard remains (returns false: the loop is idle).
  bool WaitForPostOrWork() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (!inbox_.empty() || StopRequested()) return true;
      if (work_count_ == 0) return false;
      cv_.wait(lock);
    }
  }

  template <RunMode kMode>
  void RunLoop(int64_t deadline_ns) {
    [[maybe_unused]] const std::conditional_t<kVirtual, NoTimerSlack, TightTimerSlack> slack;
    for (;;) {
      // One load per event for both Stop() and Post().
      if (const uint32_t attention = attention_.load(std::memory_order_relaxed)) [[unlikely]] {
        if (attention & kStopBit) {
          attention_.fetch_and(~kStopBit, std::memory_order_relaxed);
          return;
        }
        DrainInbox();
      }

      int64_t next_ns = kMaxNs;  // time of the next live event, if any
      if (live_ != 0) [[likely]] {
        const QueuedEvent& top = queue_->Top();
        const uint32_t i = top.slot;
        Slot& s = slots_.at(i);
        if (SlotTable::Generation(s) != top.generation) [[unlikely]] {
          PopDead(i, s);
          continue;
        }
        next_ns = top.time_ns;
        bool due = true;
        if constexpr (kMode == RunMode::kUntilDeadline) due = next_ns <= deadline_ns;
        if constexpr (!kVirtual) due = due && next_ns <= real_clock_.NowNs();
        if (due) [[likely]] {
          RunTop(i, s, next_ns);
          continue;
        }
      } else if (!queue_->Empty()) {
        // Only dead entries remain: drop them (they never move the clock).
        while (!queue_->Empty()) {
          const uint32_t i = queue_->Top().slot;
          PopDead(i, slots_.at(i));
        }
      }

      // Nothing is due: decide whether to return or wait.
      if constexpr (kMode == RunMode::kUntilDeadline) {
        if constexpr (kVirtual) {
          if (deadline_ns != kMaxNs && deadline_ns > NowNs()) {
            now_ns_.store(deadline_ns, std::memory_order_relaxed);
          }
          return;
        } else {
          if (real_clock_.NowNs() >= deadline_ns) {
            // The clock may have passed the next event's time since it was read above: that
            // event is due now, and runs before the return if the deadline covers it.
            if (next_ns <= deadline_ns) continue;
            return;
          }
          Wait(std::min(next_ns, deadline_ns));
          continue;
        }
      }
      if (next_ns != kMaxNs) {
        // Real time, a timer pending but not due yet.
        Wait(next_ns);
        continue;
      }
      if constexpr (kMode == RunMode::kUntilIdle) {
        if (!WaitForPostOrWork()) return;
      } else {
        Wait(kMaxNs);
      }
    }
  }

  // Runs the live event at the top of the queue, in slot `i`, due at `t`.
  void RunTop(uint32_t i, Slot& s, int64_t t) {
    if constexpr (kVirtual) now_ns_.store(t, std::memory_order_relaxed);
    // Its handle is stale from now on.
    SlotTable::Generation(s) = NextGeneration(SlotTable::Generation(s));
    SlotTable::SetState(s, State::kRunning);
    --live_;
    ++executed_;
    top_running_ = true;  // the entry stays on top while the callback runs
    if constexpr (std::is_same_v<Queue, LadderEventQueue>) {
      // The slot of the event six ahead: an unprefetched slot costs ~100 ns at 10^5 pending.
      // Measured on the hold model, alternating runs, 10^5 pending: with a log() per sample,
      // distance 1: 10.0 M events/s, 2: 12.5, 3: 14.4, 4: 16.0, 5: 16.2, 6: 15.6, 8: 14.5; with
      // the ziggurat's cheaper samples, whose events are shorter, 6 gained 5-12% over 4 and 8
      // no more than 6 (6 against 4 with log(): within noise; at 10^6 and 10^3, 6 the same as
      // 4 within 2%). At 10^5, ~90% of events had six entries after them in the lane (four
      // entries: ~95%) until the ladder kept its lane at kMinLane entries: now
      // all do while its rungs hold more, and an entry of the bottom's heap ahead of the one
      // six ahead no longer stops the prefetch (the heap's entries are recent pushes, whose
      // slots are in cache), which took 10^5 to 0.86-0.95 of its time and 10^6 to 0.72.
      static_assert(6 < LadderEventQueue::kMinLane, "the lane keeps the event six ahead");
      if (const QueuedEvent* next = queue_->Upcoming(6)) __builtin_prefetch(&slots_.at(next->slot));
    } else if constexpr (std::is_same_v<Queue, HeapEventQueue>) {
      // Fetch the next event's slot (a likely cache miss) while this callback runs.
      if (const QueuedEvent* next = queue_->RunnerUp()) __builtin_prefetch(&slots_.at(next->slot));
    }
    s.Invoke();
    s.Destroy();
    slots_.Free(i, s);
    if (top_running_) {
      top_running_ = false;
      queue_->Pop();
    }
  }

  // Loop thread only.
  std::unique_ptr<EventQueue> owned_queue_;
  Queue* const queue_;
  SlotTable slots_;
  uint64_t next_seq_ = 0;
  size_t live_ = 0;  // pending scheduled events and moved posts, i.e. live queue entries
  size_t dead_ = 0;  // cancelled entries still in the queue
  uint64_t executed_ = 0;
  const int64_t spin_ns_;         // real-time loops: busy-wait this long before a timer
  bool top_running_ = false;      // the queue's top entry is the running event's
  int destroying_ = 0;            // cancelled callbacks being destroyed (Cancel may nest)
  std::vector<Callback> draining_;

  // Thread-safe.
  std::atomic<int64_t> now_ns_;  // virtual loops: the clock
  LoopClock loop_clock_;
  RealClock real_clock_;  // real-time loops: the clock (unused by virtual ones)
  // kStopBit: Stop() was called and no Run* has returned for it yet. kInboxBit: the inbox may
  // hold posts (set and cleared under mu_).
  static constexpr uint32_t kStopBit = 1;
  static constexpr uint32_t kInboxBit = 2;
  std::atomic<uint32_t> attention_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Callback> inbox_;  // guarded by mu_
  size_t work_count_ = 0;        // guarded by mu_
};

template <bool kVirtual>
std::unique_ptr<EventLoop> NewLoop(EventLoopOptions options) {
  const absl::Duration spin = options.spin_before_due;
  const int64_t spin_ns = kVirtual || spin <= absl::ZeroDuration() ? 0
                          : spin == absl::InfiniteDuration()         ? kMaxNs
                                                                      : ToInt64Ns(spin);
  std::unique_ptr<EventQueue> queue = std::move(options.queue);
  if (queue == nullptr) queue = std::make_unique<LadderEventQueue>();
  if (auto* ladder = dynamic_cast<LadderEventQueue*>(queue.get())) {
    return std::make_unique<EventLoopImpl<LadderEventQueue, kVirtual>>(std::move(queue), ladder,
                                                                      options.start_time, spin_ns);
  }
  if (auto* heap = dynamic_cast<HeapEventQueue*>(queue.get())) {
    return std::make_unique<EventLoopImpl<HeapEventQueue, kVirtual>>(std::move(queue), heap,
                                                                    options.start_time, spin_ns);
  }
  EventQueue* q = queue.get();
  return std::make_unique<EventLoopImpl<EventQueue, kVirtual>>(std::move(queue), q,
                                                              options.start_time, spin_ns);
}

}  // namespace

std::unique_ptr<EventLoop> NewVirtualEventLoop(EventLoopOptions options) {
  return NewLoop<true>(std::move(options));
}

std::unique_ptr<EventLoop> NewRealTimeEventLoop(EventLoopOptions options) {
  return NewLoop<false>(std::move(options));
}

}  // namespace kiln
