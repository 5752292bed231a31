// libFuzzer target: an untrusted CreateTrainingJob request's JSON, parsed and
// validated as the engine and `kiln validate` take it.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kiln/json.h"
#include "kiln/v1/sagemaker.pb.h"
#include "kiln/validation.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::v1::CreateTrainingJobRequest request;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (kiln::ParseJson(text, request).ok()) {
    kiln::ValidateCreateTrainingJobRequest(request).IgnoreError();
  }
  return 0;
}
