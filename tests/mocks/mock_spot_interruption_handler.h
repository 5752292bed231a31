// A gmock double of SpotInterruptionHandler (kiln/spot.h). Synchronous.
#ifndef KILN_TESTS_MOCKS_MOCK_SPOT_INTERRUPTION_HANDLER_H_
#define KILN_TESTS_MOCKS_MOCK_SPOT_INTERRUPTION_HANDLER_H_

#include <string>

#include "gmock/gmock.h"
#include "kiln/spot.h"

namespace kiln::mocks {

class MockSpotInterruptionHandler : public SpotInterruptionHandler {
 public:
  MOCK_METHOD(InterruptionDecision, OnInterruption, (const InterruptionContext& context),
              (override));
  MOCK_METHOD(std::string, Name, (), (const, override));
};

}  // namespace kiln::mocks

#endif  // KILN_TESTS_MOCKS_MOCK_SPOT_INTERRUPTION_HANDLER_H_
