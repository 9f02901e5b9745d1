#include "core/error.h"
#include "io/tensor_source.h"

namespace tachyon {

std::unique_ptr<TensorSource> open_torch_source(const std::string& path) {
  raise<InvalidArgument>("{}: PyTorch .bin checkpoints are not supported yet", path);
}

}  // namespace tachyon
