// The bytes a JobRecord is kept as in the SQLite journal's `state` column:
// everything but its id, name and request, which have columns of their own.
// A version byte first; integers little-endian, strings length-prefixed.
// Internal to kiln::journal_sqlite.
#ifndef KILN_JOURNAL_SQLITE_INTERNAL_RECORD_CODEC_H_
#define KILN_JOURNAL_SQLITE_INTERNAL_RECORD_CODEC_H_

#include <string>
#include <string_view>

#include "kiln/journal.h"

namespace kiln::journal_sqlite::internal {

// The format's version: the first byte of every state. Version 2 added the
// billing mark (JobRecord::held_until) and the warm-pool record
// (JobRecord::pool); states of version 1 are read too, without them.
inline constexpr unsigned char kStateVersion = 2;

// Appends the state of `record` to `out`.
void EncodeState(const JobRecord& record, std::string& out);

// Fills the state fields of `record` from `bytes`. Returns false when the
// bytes are not a state of this version or an older one (truncated, trailing
// bytes, unknown version).
bool DecodeState(std::string_view bytes, JobRecord& record);

}  // namespace kiln::journal_sqlite::internal

#endif  // KILN_JOURNAL_SQLITE_INTERNAL_RECORD_CODEC_H_
