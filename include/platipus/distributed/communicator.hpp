// Communicator: the collective operations that data-parallel meta-training
// needs across processes, as learn2learn's distributed_maml.py uses
// torch.distributed: a sum of every rank's buffer (all-reduce) and a copy of
// one rank's buffer to all (broadcast). Implementations: MPI for host memory
// (distributed/mpi.hpp), NCCL for CUDA device memory (distributed/nccl.hpp);
// without either, a program is one process and needs neither.
//
// A meta-learner distributed over N ranks (MetaLearner::distribute) takes
// the tasks of the meta-batch it is given in the slice rank_tasks(...) by
// global task index (meta/driver/task_parallel.hpp), sums its slice's
// meta-gradients, and all-reduces them before the optimiser's step, so every
// rank takes the same step.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "platipus/backend/cpu/cpu.hpp"
#include "platipus/core/error.hpp"
#include "platipus/tensor/tensor.hpp"

namespace platipus {

// Where a communicator's buffers live: host memory (MPI) or the CUDA
// device's (NCCL).
enum class CommunicatorMemory { host, device };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The ranks on this rank's machine (they share its cores and memory).
  virtual int local_size() const = 0;
  virtual std::string_view name() const = 0;  // "MPI", "NCCL", for messages
  virtual CommunicatorMemory memory() const = 0;

  // In place: every rank's buffer becomes the element-wise sum of all ranks' buffers.
  virtual void all_reduce_sum(std::span<float> buffer) = 0;
  virtual void all_reduce_sum(std::span<double> buffer) = 0;
  // In place: every rank's buffer becomes rank `root`'s.
  virtual void broadcast(std::span<float> buffer, int root) = 0;
  virtual void broadcast(std::span<double> buffer, int root) = 0;

  // Ends every rank's process with `status` (MPI_Abort): what a rank that
  // fails must call, after reporting, so that the others do not wait for it
  // in their next collective for ever.
  [[noreturn]] virtual void abort(int status) noexcept = 0;
};

namespace detail {

// Copies `tensors` into one flat buffer in the communicator's memory, calls
// `collective` on it, and copies the result back: one collective call per
// meta-step rather than one per tensor.
template <class T, class B, class F>
void through_flat_buffer(Communicator& comm, std::span<Tensor<T, B>* const> tensors,
                         F&& collective) {
  std::int64_t total = 0;
  for (const auto* t : tensors) total += t->numel();
  if (comm.memory() == CommunicatorMemory::host) {
    std::vector<T> flat(static_cast<std::size_t>(total));
    std::int64_t at = 0;
    for (const auto* t : tensors) {
      if (t->numel() > 0) B::copy_to_host(flat.data() + at, t->data(), t->bytes());
      at += t->numel();
    }
    collective(std::span<T>(flat));
    at = 0;
    for (auto* t : tensors) {
      if (t->numel() > 0) B::copy_from_host(t->data(), flat.data() + at, t->bytes());
      at += t->numel();
    }
  } else if constexpr (std::is_same_v<B, cpu>) {
    fail("Communicator",
         "{} reduces device memory, and the {} backend's tensors are in host memory", comm.name(),
         B::name);
  } else {
    Tensor<T, B> flat(Shape{total});
    std::int64_t at = 0;
    for (const auto* t : tensors) {
      if (t->numel() > 0) B::copy(flat.data() + at, t->data(), t->bytes());
      at += t->numel();
    }
    // NCCL queues on this thread's stream, after the copies and before the copies back.
    collective(std::span<T>(flat.data(), static_cast<std::size_t>(total)));
    at = 0;
    for (auto* t : tensors) {
      if (t->numel() > 0) B::copy(t->data(), flat.data() + at, t->bytes());
      at += t->numel();
    }
  }
}

}  // namespace detail

// Sums `tensors` over all ranks, in place.
template <class T, class B>
void all_reduce_sum(Communicator& comm, std::span<Tensor<T, B>* const> tensors) {
  detail::through_flat_buffer(comm, tensors, [&](std::span<T> flat) { comm.all_reduce_sum(flat); });
}

// Gives every rank rank `root`'s `tensors`, in place.
template <class T, class B>
void broadcast(Communicator& comm, std::span<Tensor<T, B>* const> tensors, int root = 0) {
  detail::through_flat_buffer(comm, tensors,
                              [&](std::span<T> flat) { comm.broadcast(flat, root); });
}

}  // namespace platipus
