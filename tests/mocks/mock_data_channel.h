// A gmock double of DataChannel (kiln/data_channel.h). Complete Deliver's callback with
// CompleteLater<1> (complete_later.h), which keeps the contract (later, on the loop).
#ifndef KILN_TESTS_MOCKS_MOCK_DATA_CHANNEL_H_
#define KILN_TESTS_MOCKS_MOCK_DATA_CHANNEL_H_

#include <string_view>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "kiln/data_channel.h"
#include "mocks/complete_later.h"

namespace kiln::mocks {

class MockDataChannel : public DataChannel {
 public:
  MOCK_METHOD(void, Deliver, (const ChannelDelivery& delivery, DoneCallback done), (override));
  MOCK_METHOD(absl::Status, CheckChannel,
              (const v1::Channel& channel, std::string_view input_mode), (override));
  MOCK_METHOD(void, EndJob, (std::string_view job_name), (override));
  MOCK_METHOD(void, SetListener, (DataChannelListener * listener), (override));
};

}  // namespace kiln::mocks

#endif  // KILN_TESTS_MOCKS_MOCK_DATA_CHANNEL_H_
