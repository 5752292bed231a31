// libFuzzer target: an untrusted scenario's JSON (kiln simulate), parsed with
// an empty directory for the trace files it names.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/sim/scenario.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string base = [] {
    char pattern[] = "/tmp/kiln-scenario-fuzz-XXXXXX";
    const char* made = mkdtemp(pattern);
    if (made == nullptr) abort();
    return std::string(made);
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  kiln::sim::ParseScenario(text, base).status().IgnoreError();
  return 0;
}
