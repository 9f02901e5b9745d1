#include "frontend/backend.h"

namespace tachyon {

std::string_view gen_finish_name(GenFinish f) {
  switch (f) {
    case GenFinish::kStop:
      return "stop";
    case GenFinish::kLength:
      return "length";
    case GenFinish::kCancelled:
      return "cancelled";
    case GenFinish::kTimeout:
      return "timeout";
    case GenFinish::kError:
      return "error";
  }
  return "unknown";
}

}  // namespace tachyon
