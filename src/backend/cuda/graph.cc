// CUDA graphs: CudaBackend::record captures the work queued on the backend's stream
// and instantiates it once; replay() launches the executable graph.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"

namespace tachyon::cuda {
namespace {

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream, std::shared_ptr<uint64_t> epoch)
      : exec_(exec), stream_(stream), epoch_(std::move(epoch)), recorded_epoch_(*epoch_) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  bool replay() override {
    if (*epoch_ != recorded_epoch_) return false;
    TACHYON_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    return true;
  }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  std::shared_ptr<uint64_t> epoch_;
  uint64_t recorded_epoch_;
};

}  // namespace

std::unique_ptr<DeviceGraph> CudaBackend::record(const std::function<void()>& fn) {
  TACHYON_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const uint64_t epoch = *scratch_epoch_;
  cudaGraph_t graph = nullptr;
  try {
    fn();
  } catch (...) {
    cudaStreamEndCapture(stream_, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  TACHYON_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  // Scratch that moved while recording was freed under the recorded work: give up (the
  // caller runs the step eagerly once more, which settles the sizes).
  if (*scratch_epoch_ != epoch) {
    cudaGraphDestroy(graph);
    return nullptr;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  TACHYON_CUDA_CHECK(rc);
  return std::make_unique<CudaGraph>(exec, stream_, scratch_epoch_);
}

}  // namespace tachyon::cuda
