// NcclCommunicator: the Communicator over CUDA devices, for meta-learners on
// platipus::cuda. Collectives run on the calling thread's stream
// (cudaStreamPerThread, where platipus::cuda queues its work) and in device
// memory, so a meta-gradient never leaves the GPU. NCCL's communicator is
// bootstrapped through MPI: rank 0 makes the unique id (ncclGetUniqueId) and
// MPI broadcasts it. Link the CMake target platipus::nccl (built when CMake
// finds nccl.h and libnccl beside CUDA and MPI; PLATIPUS_WITH_NCCL).
//
//   auto mpi = std::make_shared<platipus::MpiCommunicator>();
//   auto world = platipus::device_communicator(mpi);  // NCCL, or MPI when ranks share a GPU
//   learner.distribute(world);
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string_view>

#include "platipus/backend/cuda/status.hpp"
#include "platipus/distributed/mpi.hpp"

namespace platipus {

namespace detail {
inline void check_nccl(ncclResult_t status, std::string_view call) {
  if (status != ncclSuccess) fail("NCCL", "{} failed: {}", call, ncclGetErrorString(status));
}
}  // namespace detail

class NcclCommunicator final : public Communicator {
 public:
  // The ranks of `mpi`, each on CUDA device (its rank among the ranks of its
  // machine) modulo the machine's device count, which it makes current for
  // the calling thread: make it before any other CUDA work, and keep
  // platipus::cuda's one thread (threads = 1, its default), as a pool's
  // other threads would compute on device 0.
  explicit NcclCommunicator(std::shared_ptr<MpiCommunicator> mpi) : mpi_(std::move(mpi)) {
    int devices = 0;
    detail::check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    check(devices > 0, "NCCL", "rank {} sees no CUDA device", mpi_->rank());
    detail::check_cuda(cudaSetDevice(mpi_->local_rank() % devices), "cudaSetDevice");
    ncclUniqueId id;
    if (mpi_->rank() == 0) detail::check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi_->broadcast_bytes(&id, static_cast<int>(sizeof id), 0);
    detail::check_nccl(ncclCommInitRank(&comm_, mpi_->size(), id, mpi_->rank()),
                       "ncclCommInitRank");
  }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override { ncclCommDestroy(comm_); }

  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  int local_size() const override { return mpi_->local_size(); }
  std::string_view name() const override { return "NCCL"; }
  CommunicatorMemory memory() const override { return CommunicatorMemory::device; }

  void all_reduce_sum(std::span<float> buffer) override { reduce(buffer, ncclFloat32); }
  void all_reduce_sum(std::span<double> buffer) override { reduce(buffer, ncclFloat64); }
  void broadcast(std::span<float> buffer, int root) override { share(buffer, ncclFloat32, root); }
  void broadcast(std::span<double> buffer, int root) override { share(buffer, ncclFloat64, root); }

  [[noreturn]] void abort(int status) noexcept override {
    ncclCommAbort(comm_);
    mpi_->abort(status);
  }

 private:
  void reduce(auto buffer, ncclDataType_t type) {
    detail::check_nccl(ncclAllReduce(buffer.data(), buffer.data(), buffer.size(), type, ncclSum,
                                     comm_, cudaStreamPerThread),
                       "ncclAllReduce");
  }
  void share(auto buffer, ncclDataType_t type, int root) {
    detail::check_nccl(ncclBroadcast(buffer.data(), buffer.data(), buffer.size(), type, root, comm_,
                                     cudaStreamPerThread),
                       "ncclBroadcast");
  }

  std::shared_ptr<MpiCommunicator> mpi_;
  ncclComm_t comm_ = nullptr;
};

// The communicator of meta-learners on platipus::cuda over `mpi`'s ranks:
// NCCL when every rank of every machine has a GPU of its own, else `mpi`
// itself, which reduces through host memory (NCCL refuses two ranks on one
// GPU). All ranks agree on the choice. Call it before any other CUDA work.
inline std::shared_ptr<Communicator> device_communicator(std::shared_ptr<MpiCommunicator> mpi) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  int own_gpu = mpi->local_size() <= devices ? 1 : 0;
  detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &own_gpu, 1, MPI_INT, MPI_MIN, mpi->handle()),
                    "MPI_Allreduce");
  if (own_gpu == 1) return std::make_shared<NcclCommunicator>(std::move(mpi));
  return mpi;
}

}  // namespace platipus
