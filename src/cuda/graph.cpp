// CudaGraph's host side: stream capture on the calling thread's stream in
// relaxed mode (so that a first-time cudaMalloc of the graph's pool may
// happen while recording), the pool and salt swapped in for the recording,
// and instantiation and launch.
#include "platipus/backend/cuda/graph.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "device_memory.hpp"
#include "platipus/backend/cuda/status.hpp"
#include "platipus/core/error.hpp"

namespace platipus {

namespace {
thread_local const std::uint64_t* recording_salt = nullptr;
}  // namespace

const std::uint64_t* detail::graph_random_salt() {
  return recording_salt;
}

struct CudaGraph::State {
  detail::DeviceCache pool;  // declared first: freed last, after the graph
  std::uint64_t* salt = nullptr;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  bool recording = false;

  // Ends a capture that is under way, keeping its graph only if asked.
  void stop_recording(bool keep) {
    cudaGraph_t captured = nullptr;
    const cudaError_t status = cudaStreamEndCapture(cudaStreamPerThread, &captured);
    detail::recording_pool() = nullptr;
    recording_salt = nullptr;
    recording = false;
    if (keep && status == cudaSuccess) {
      graph = captured;
      return;
    }
    if (captured) cudaGraphDestroy(captured);
    if (keep) detail::check_cuda(status, "cudaStreamEndCapture");
    cudaGetLastError();  // an abandoned capture leaves its error behind
  }
};

CudaGraph::CudaGraph(std::uint64_t salt) : state_(std::make_unique<State>()) {
  state_->salt = static_cast<std::uint64_t*>(detail::raw_device_allocate(sizeof(std::uint64_t)));
  detail::check_cuda(cudaMemcpy(state_->salt, &salt, sizeof salt, cudaMemcpyHostToDevice),
                     "cudaMemcpy (graph salt)");
}

// A replay may still run: wait for it before its memory goes.
CudaGraph::~CudaGraph() {
  if (state_->recording) state_->stop_recording(false);
  cudaStreamSynchronize(cudaStreamPerThread);
  if (state_->exec) cudaGraphExecDestroy(state_->exec);
  if (state_->graph) cudaGraphDestroy(state_->graph);
  detail::raw_device_free(state_->salt);
}

void CudaGraph::begin_recording() {
  check(!state_->graph && !state_->recording, "CudaGraph::record",
        "this graph already has a recording");
  check(!detail::recording_pool(), "CudaGraph::record",
        "this thread is already recording another graph");
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  detail::check_cuda(cudaStreamIsCapturing(cudaStreamPerThread, &status), "cudaStreamIsCapturing");
  check(status == cudaStreamCaptureStatusNone, "CudaGraph::record",
        "the thread's stream is already being captured");
  detail::check_cuda(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed),
                     "cudaStreamBeginCapture");
  state_->recording = true;
  // The thread's cached blocks, free since the eager work before (a warm-up
  // step), become the pool's: the recording reuses them rather than taking
  // a second copy of a step's memory. Stream order keeps that work first.
  state_->pool.adopt_free_blocks(detail::DeviceCache::local());
  detail::recording_pool() = &state_->pool;
  recording_salt = state_->salt;
}

void CudaGraph::end_recording() {
  try {
    detail::advance_graph_salt(state_->salt);  // the recording's last node
  } catch (...) {
    state_->stop_recording(false);
    throw;
  }
  state_->stop_recording(true);
  detail::check_cuda(cudaGraphInstantiate(&state_->exec, state_->graph, 0), "cudaGraphInstantiate");
}

void CudaGraph::abandon_recording() {
  state_->stop_recording(false);
}

void CudaGraph::replay() {
  check(state_->exec != nullptr, "CudaGraph::replay", "nothing has been recorded");
  detail::check_cuda(cudaGraphLaunch(state_->exec, cudaStreamPerThread), "cudaGraphLaunch");
}

std::size_t CudaGraph::nodes() const {
  if (!state_->graph) return 0;
  std::size_t count = 0;
  detail::check_cuda(cudaGraphGetNodes(state_->graph, nullptr, &count), "cudaGraphGetNodes");
  return count;
}

std::size_t CudaGraph::kernels() const {
  std::size_t count = nodes();
  std::vector<cudaGraphNode_t> all(count);
  if (count > 0)
    detail::check_cuda(cudaGraphGetNodes(state_->graph, all.data(), &count), "cudaGraphGetNodes");
  return static_cast<std::size_t>(std::ranges::count_if(all, [](cudaGraphNode_t node) {
    cudaGraphNodeType type{};
    detail::check_cuda(cudaGraphNodeGetType(node, &type), "cudaGraphNodeGetType");
    return type == cudaGraphNodeTypeKernel;
  }));
}

}  // namespace platipus
