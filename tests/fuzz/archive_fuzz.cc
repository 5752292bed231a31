// libFuzzer target: an untrusted image tarball unpacked into a fresh
// directory (ExtractArchive). Whatever the bytes, unpacking returns a status,
// reads no freed memory, and leaves nothing outside the directory.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "local/internal/archive.h"
#include "local/internal/fs.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string work = [] {
    char pattern[] = "/tmp/kiln-archive-fuzz-XXXXXX";
    const char* made = mkdtemp(pattern);
    if (made == nullptr) abort();
    return std::string(made);
  }();
  const std::string tarball = work + "/image.tar";
  const std::string image = work + "/image";
  if (!kiln::local::internal::WriteFileAtomic(tarball, std::string_view(
                                                           reinterpret_cast<const char*>(data),
                                                           size))
           .ok()) {
    abort();
  }
  kiln::local::internal::ExtractArchive(tarball, image).IgnoreError();
  // Only the tarball and the image below the work directory.
  if (!kiln::local::internal::RemoveTree(image).ok()) abort();
  return 0;
}
