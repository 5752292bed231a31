// The agent's outbox: the numbered events a `kiln agent` sends its controller
// (log lines in batches, container exits, command results, interruption
// notices), kept in a directory on the host until the controller acknowledges
// them, so that none is lost when the agent or the controller restarts. The
// agent appends; its session with the controller reads from the last event
// the controller holds, sends, and acknowledges what the controller confirms.
//
//   auto outbox = kiln::agent::Outbox::Open("/var/lib/kiln/agent/outbox").value();
//   uint64_t seq = outbox->Append(batch).value();              // 1, 2, ...
//   // The session, from what the controller last confirmed:
//   while (outbox->WaitFor(sent, absl::Seconds(30))) {
//     std::vector<kiln::agent::OutboxEvent> events = outbox->Read(sent, 1 << 20).value();
//     ... send them; sent = events.back().seq; on the controller's ack:
//     outbox->Acknowledge(acked);
//   }
//
// Durability: an Append that returned OK survives the agent process's death
// (SIGKILL included), as the write is in the kernel's page cache; with
// OutboxOptions::sync it also survives the host's (fdatasync after each
// write). Events are numbered 1, 2, ... without a gap, and the numbering goes
// on across reopening, also after every event was acknowledged and its files
// deleted.
//
// On disk (the directory 0700, its files 0600):
//   lock                  held with flock(LOCK_EX) while an Outbox is open
//   acknowledged          16 bytes, rewritten in place: the highest acknowledged
//                         number (u64), its CRC-32C (u32), 4 zero bytes
//   <20 digits>.log       a segment: records numbered from the number in its
//                         name, one after the other; a new segment is started
//                         when the next record would take the current one past
//                         OutboxOptions::segment_bytes, and a segment is
//                         deleted once all its events are acknowledged
// A record is a 16-byte header and the payload; integers are little-endian:
//   u32 payload length | u32 CRC-32C (Castagnoli) of seq and payload | u64 seq | payload
// Open checks every record of the segments not wholly acknowledged. A damaged
// tail of the last segment (a record cut short or not as written, with no
// valid record after it: what a power loss leaves) is truncated away; damage
// anywhere else is DataLoss.
//
// Threading: an Outbox is thread-safe. One Outbox per directory: a second
// Open of the same directory, in this process or another, is refused while
// the first is open.
#ifndef KILN_AGENT_OUTBOX_H_
#define KILN_AGENT_OUTBOX_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kiln::agent {

// The largest payload Append takes.
inline constexpr size_t kMaxOutboxPayloadBytes = 64 << 20;

struct OutboxOptions {
  // Bytes per segment file before a new one is started (1 to 1 GiB). A
  // record larger than this gets a segment of its own.
  int64_t segment_bytes = 8 << 20;
  // fdatasync after each Append and Acknowledge (off: an event survives the
  // process's death, not the host's).
  bool sync = false;
};

// One event: its number and what was appended.
struct OutboxEvent {
  uint64_t seq = 0;
  std::string payload;
};

class Outbox {
 public:
  // Opens the outbox in `dir`, making the directory (0700, with its missing
  // parents) and an empty outbox when missing. Errors: InvalidArgument for
  // options out of range; FailedPrecondition naming `dir` when an Outbox of
  // it is open (in this process or another); DataLoss naming the file and
  // the byte offset when a record other than the last segment's tail is
  // damaged, or naming the numbers that no file holds when segments are
  // missing; Internal naming the path when a file cannot be made, read or
  // locked. The result is owned by the caller; destroying it closes it.
  static absl::StatusOr<std::unique_ptr<Outbox>> Open(std::string dir, OutboxOptions options = {});

  virtual ~Outbox() = default;

  // The directory given to Open.
  virtual const std::string& dir() const = 0;

  // Appends `payload` as the next event (one write) and returns its number,
  // last_seq() + 1. Errors (nothing is appended, and the outbox stays
  // usable): InvalidArgument when the payload is larger than
  // kMaxOutboxPayloadBytes; ResourceExhausted naming the file when the disk
  // or a file size limit is full (the partial record is truncated away:
  // retry once space is back, e.g. after Acknowledge freed segments);
  // Internal naming the file for any other write error; FailedPrecondition
  // after Close. Thread-safe.
  virtual absl::StatusOr<uint64_t> Append(std::string_view payload) = 0;

  // The events numbered after `after`, in order and without a gap, whose
  // payloads add up to at most `max_bytes`, but at least one when there is
  // one; empty when there is none after `after`. Events acknowledged before
  // the call are skipped: the first event is then acknowledged() + 1. Errors:
  // DataLoss naming the file and offset when a record no longer reads as
  // written; Internal naming the file when it cannot be read;
  // FailedPrecondition after Close. Thread-safe; the file reads happen
  // outside the lock that Append takes.
  virtual absl::StatusOr<std::vector<OutboxEvent>> Read(uint64_t after, size_t max_bytes) const = 0;

  // Records that every event up to `seq` is acknowledged (written to the
  // acknowledged file in place, so it needs no new disk space), then deletes
  // the segments whose events are all acknowledged. A `seq` not above
  // acknowledged() changes nothing. Errors: InvalidArgument when `seq` is
  // above last_seq(); Internal naming the file when it cannot be written or
  // deleted (a segment left behind is deleted at the next Open);
  // FailedPrecondition after Close. Thread-safe.
  virtual absl::Status Acknowledge(uint64_t seq) = 0;

  // The number of the last event appended (0: none ever), and of the last
  // one acknowledged (0: none). Thread-safe.
  virtual uint64_t last_seq() const = 0;
  virtual uint64_t acknowledged() const = 0;

  // Blocks until an event numbered after `after` exists, `timeout` passes,
  // Wake() is called or the outbox is closed; returns whether such an event
  // exists. Thread-safe.
  virtual bool WaitFor(uint64_t after, absl::Duration timeout) const = 0;

  // Makes the WaitFor calls blocked now return. Thread-safe.
  virtual void Wake() = 0;

  // Wakes every WaitFor, closes the files and releases the directory for the
  // next Open. Afterwards Append, Read and Acknowledge return
  // FailedPrecondition and WaitFor returns at once; last_seq() and
  // acknowledged() keep their values. Closing twice is harmless.
  // Thread-safe.
  virtual void Close() = 0;
};

}  // namespace kiln::agent

#endif  // KILN_AGENT_OUTBOX_H_
