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
#include <set>
#include <string>
#include <string_view>
#include <vector>

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
// NCCL when every rank has a GPU of its own, else `mpi` itself, which
// reduces through host memory (NCCL refuses two ranks on one GPU). Each rank
// takes the GPU NcclCommunicator would (its local rank modulo the devices it
// sees) and the ranks compare the GPUs' UUIDs, so a scheduler that shows
// each rank one distinct GPU (srun --gpus-per-task=1) gets NCCL too; every
// rank sees the same UUIDs, so all agree. Call it before any other CUDA work.
inline std::shared_ptr<Communicator> device_communicator(std::shared_ptr<MpiCommunicator> mpi) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  cudaUUID_t mine{};  // all zero: no device, never distinct
  if (devices > 0) {
    cudaDeviceProp properties{};
    detail::check_cuda(cudaGetDeviceProperties(&properties, mpi->local_rank() % devices),
                       "cudaGetDeviceProperties");
    mine = properties.uuid;
  }
  std::vector<cudaUUID_t> all(static_cast<std::size_t>(mpi->size()));
  detail::check_mpi(
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, mpi->handle()),
      "MPI_Allgather");
  const auto key = [](const cudaUUID_t& u) {
    return std::string(u.bytes, sizeof u.bytes);
  };
  std::set<std::string> distinct;
  for (const auto& u : all) distinct.insert(key(u));
  // From the gathered UUIDs alone, so that every rank decides alike.
  const bool own_gpus = distinct.size() == all.size() && !distinct.contains(key(cudaUUID_t{}));
  if (own_gpus) return std::make_shared<NcclCommunicator>(std::move(mpi));
  return mpi;
}

}  // namespace platipus
