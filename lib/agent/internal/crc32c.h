// CRC-32C (Castagnoli, the polynomial of iSCSI, ext4 and LevelDB), as the
// agent's outbox checks its records with: the SSE4.2 instruction where the
// CPU has it, a table otherwise. Thread-safe.
#ifndef KILN_AGENT_INTERNAL_CRC32C_H_
#define KILN_AGENT_INTERNAL_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace kiln::agent::internal {

// The CRC-32C of `n` bytes at `data`, continuing from `crc`, the CRC of the
// bytes before them (0 for none): Crc32c(Crc32c(0, a), b) == Crc32c(0, a + b).
uint32_t Crc32c(uint32_t crc, const void* data, size_t n);

// The same computed with the table alone (what Crc32c falls back to).
uint32_t Crc32cPortable(uint32_t crc, const void* data, size_t n);

}  // namespace kiln::agent::internal

#endif  // KILN_AGENT_INTERNAL_CRC32C_H_
