// MpiCommunicator: the Communicator over MPI processes (host memory), for
// programs started by mpirun, mpiexec or a scheduler's srun. Link the CMake
// target platipus::mpi (built when CMake finds MPI; PLATIPUS_WITH_MPI).
//
//   if (platipus::launched_by_mpi()) {
//     auto world = std::make_shared<platipus::MpiCommunicator>();  // MPI_Init
//     learner.distribute(world);  // rank 0's meta-parameters on every rank
//   }
//
// The communicator initialises MPI (thread level "funneled": only the thread
// that made it calls MPI) unless the program already has, and finalises it
// when destroyed if it initialised it. A rank that fails must call abort(),
// or its peers wait for it in their next all-reduce.
#pragma once

#include <mpi.h>

#include <cstdlib>
#include <limits>
#include <string_view>

#include "platipus/distributed/communicator.hpp"

namespace platipus {

// Whether an MPI launcher started this process: the variables Open MPI's
// mpirun (OMPI_COMM_WORLD_SIZE), MPICH's and Intel MPI's Hydra (PMI_SIZE) and
// PMIx launchers such as srun --mpi=pmix (PMIX_RANK) set. A program started
// directly is one process and leaves MPI uninitialised.
inline bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

namespace detail {
inline void check_mpi(int code, std::string_view call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail("MPI", "{} failed: {}", call, std::string_view(text, static_cast<std::size_t>(length)));
}
}  // namespace detail

class MpiCommunicator final : public Communicator {
 public:
  // MPI_COMM_WORLD's ranks (a duplicate, so the library's messages never
  // meet the program's own).
  MpiCommunicator() {
    int initialized = 0, provided = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      detail::check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided),
                        "MPI_Init_thread");
      owns_mpi_ = true;
    } else {
      MPI_Query_thread(&provided);
    }
    // The pool's threads never call MPI, but they exist: "funneled" at least.
    check(provided >= MPI_THREAD_FUNNELED, "MPI",
          "the MPI library offers thread level {}, below MPI_THREAD_FUNNELED", provided);
    detail::check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    // Errors on our communicator come back as codes (and become
    // platipus::error) rather than aborting inside MPI with its own message.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Comm local;
    detail::check_mpi(
        MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
        "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
  }
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Comm_free(&comm_);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  // This rank's index among the ranks of its machine.
  int local_rank() const { return local_rank_; }
  std::string_view name() const override { return "MPI"; }
  CommunicatorMemory memory() const override { return CommunicatorMemory::host; }
  // The MPI communicator, for a program's own collectives (and NCCL's bootstrap).
  MPI_Comm handle() const { return comm_; }

  void all_reduce_sum(std::span<float> buffer) override { reduce(buffer, MPI_FLOAT); }
  void all_reduce_sum(std::span<double> buffer) override { reduce(buffer, MPI_DOUBLE); }
  void broadcast(std::span<float> buffer, int root) override { share(buffer, MPI_FLOAT, root); }
  void broadcast(std::span<double> buffer, int root) override { share(buffer, MPI_DOUBLE, root); }
  // Raw bytes from `root`, for a program's own messages (and NCCL's unique id).
  void broadcast_bytes(void* data, int bytes, int root) {
    detail::check_mpi(MPI_Bcast(data, bytes, MPI_BYTE, root, comm_), "MPI_Bcast");
  }

  [[noreturn]] void abort(int status) noexcept override {
    MPI_Abort(comm_, status);
    std::_Exit(status);  // MPI_Abort does not return; if it did, leave anyway
  }

 private:
  template <class T>
  void reduce(std::span<T> buffer, MPI_Datatype type) {
    check(buffer.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()), "MPI",
          "an all-reduce of {} values is beyond MPI's int count", buffer.size());
    detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()),
                                    type, MPI_SUM, comm_),
                      "MPI_Allreduce");
  }
  template <class T>
  void share(std::span<T> buffer, MPI_Datatype type, int root) {
    check(buffer.size() <= static_cast<std::size_t>(std::numeric_limits<int>::max()), "MPI",
          "a broadcast of {} values is beyond MPI's int count", buffer.size());
    detail::check_mpi(MPI_Bcast(buffer.data(), static_cast<int>(buffer.size()), type, root, comm_),
                      "MPI_Bcast");
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  bool owns_mpi_ = false;
};

}  // namespace platipus
