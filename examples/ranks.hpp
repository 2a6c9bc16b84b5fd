// The ranks an example meta-trains on (MPI, NCCL on CUDA) and which of them
// writes.
#pragma once

#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "backend.hpp"
#include "platipus/distributed/communicator.hpp"
#ifdef PLATIPUS_WITH_MPI
#include "platipus/distributed/mpi.hpp"
#endif
#if defined(PLATIPUS_WITH_NCCL) && defined(PLATIPUS_EXAMPLES_ON_CUDA)
#include "platipus/distributed/nccl.hpp"
#endif

namespace examples {

// The ranks this program meta-trains on: MPI's when an MPI launcher
// (mpirun, mpiexec, srun --mpi=pmix) started it and CMake found MPI, on CUDA
// with NCCL when each rank has a GPU of its own; null for one process. Made
// at the first call, which each program makes first (NCCL's ranks choose
// their GPU before any other CUDA work), and kept until exit; the CUDA
// runtime's exit handlers, registered while it was made, run after its
// destructor (ncclCommDestroy, MPI_Finalize).
inline const std::shared_ptr<platipus::Communicator>& shared_world() {
  static const std::shared_ptr<platipus::Communicator> world = [] {
    std::shared_ptr<platipus::Communicator> made;
#ifdef PLATIPUS_WITH_MPI
    if (platipus::launched_by_mpi()) {
      auto mpi = std::make_shared<platipus::MpiCommunicator>();
#if defined(PLATIPUS_WITH_NCCL) && defined(PLATIPUS_EXAMPLES_ON_CUDA)
      made = platipus::device_communicator(std::move(mpi));
#else
      made = std::move(mpi);
#endif
    }
#endif
    // A plain srun (no --mpi=pmix or pmi2) sets none of the launcher's
    // variables: its tasks would each train alone and write the same files.
    const char* tasks = std::getenv("SLURM_NTASKS");
    if (!made && tasks != nullptr && std::atoi(tasks) > 1)
      fmt::print(stderr,
                 "warning: Slurm started {} tasks without MPI (srun --mpi=pmix starts them as "
                 "ranks{}); each trains alone\n",
                 tasks,
#ifdef PLATIPUS_WITH_MPI
                 ""
#else
                 ", in a build with MPI"
#endif
      );
    return made;
  }();
  return world;
}
inline platipus::Communicator* world() {
  return shared_world().get();
}
// Whether this rank writes: files, progress and results are rank 0's alone.
inline bool is_root() {
  return world() == nullptr || world()->rank() == 0;
}

}  // namespace examples
