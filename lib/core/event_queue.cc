// Factories of the shipped EventQueue implementations (kiln/event_queue.h).
#include "kiln/event_queue.h"

#include <memory>

#include "core/internal/heap_event_queue.h"
#include "core/internal/ladder_event_queue.h"

namespace kiln {

std::unique_ptr<EventQueue> NewHeapEventQueue() {
  return std::make_unique<internal::HeapEventQueue>();
}

std::unique_ptr<EventQueue> NewLadderEventQueue() {
  return std::make_unique<internal::LadderEventQueue>();
}

}  // namespace kiln
