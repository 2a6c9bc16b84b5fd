// CudaGraph: the work one host thread queues on its stream, recorded once as
// a CUDA graph and replayed with a single launch. For meta-steps of small
// networks, whose cost is hundreds of kernel launches rather than arithmetic,
// a replay runs the same kernels back to back without the host in between.
//
// A recording fixes every kernel argument, so three things are arranged
// while it is made:
//   * memory: the thread allocates from a pool the graph owns, so the
//     buffers of a recording's intermediates stay reserved for its replays
//     and no other tensor is ever given them (the pool starts with the
//     blocks the thread had cached, so a step recorded after an eager one
//     does not hold a second copy of its memory); tensors made while
//     recording that the caller keeps are its outputs, rewritten by every
//     replay;
//   * random numbers: Philox fills mix a 64-bit salt, kept in device memory,
//     into their stream, and the graph's last node advances the salt, so
//     each replay draws fresh numbers (distributed as in an eager step, but
//     not the same numbers);
//   * nothing may wait for the device: a host read inside the recording
//     fails with a platipus::error naming the CUDA call.
// Host values (scalars, shapes, step sizes) are those of the recording. See
// meta/driver/graphed_step.hpp for a recorded meta-step.
//
// This header only declares, and g++ compiles it without CUDA; the
// definitions are in the platipus::cuda library (src/cuda/graph.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace platipus {

class CudaGraph {
 public:
  // `salt`: the random-number salt of the first replay.
  explicit CudaGraph(std::uint64_t salt);
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records what work() queues on the calling thread's stream, running none
  // of it. One recording per graph.
  template <class F>
  void record(F&& work) {
    begin_recording();
    try {
      std::forward<F>(work)();
    } catch (...) {
      abandon_recording();
      throw;
    }
    end_recording();
  }

  // Queues one run of the recording on the calling thread's stream.
  void replay();

  // Kernels, copies and other nodes in the recording.
  std::size_t nodes() const;
  // The kernel launches among them (cuBLAS's and cuDNN's included).
  std::size_t kernels() const;

 private:
  void begin_recording();
  void end_recording();
  void abandon_recording();

  struct State;
  std::unique_ptr<State> state_;
};

namespace detail {
// The salt random fills of the calling thread mix in, or null when the
// thread is not recording a graph.
const std::uint64_t* graph_random_salt();
// Queues salt <- a Philox hash of salt on the calling thread's stream.
void advance_graph_salt(std::uint64_t* salt);
}  // namespace detail

}  // namespace platipus
