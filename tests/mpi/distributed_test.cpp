// Meta-training over MPI ranks, run by ctest as `mpirun -np 2 distributed_test MODE DIR`
// (tests/CMakeLists.txt, label mpi). Exit status 0 when every check holds.
//
//   parity DIR  MAML (second order) and PLATIPUS, in float and in double,
//               trained on 2 ranks give the meta-parameters that one process
//               gives with the same seed and meta-batch (to 1e-5 relative in
//               float, 1e-10 in double), and so do both ranks resumed from a
//               checkpoint rank 0 wrote to DIR.
//   fail        rank 1 is given a batch of the wrong shape at its third step:
//               it reports the error and aborts every rank (the ctest checks
//               the status, the message and that no rank hangs).
//
// Built twice: on platipus::cpu with MPI (distributed_test) and, with
// PLATIPUS_DISTRIBUTED_ON_CUDA, on platipus::cuda (distributed_cuda_test),
// which reduces with NCCL when each rank of a machine has a GPU of its own
// and through host memory with MPI when ranks share one (NCCL refuses two
// ranks on one device); it exits 77 (skipped) where there is no device.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "platipus/distributed/mpi.hpp"
#ifdef PLATIPUS_DISTRIBUTED_ON_CUDA
#include "platipus/backend/cuda/cuda.hpp"
#include "platipus/distributed/nccl.hpp"
#endif
#include "platipus/io/training_state.hpp"
#include "platipus/platipus.hpp"

namespace {

using namespace platipus;

#ifdef PLATIPUS_DISTRIBUTED_ON_CUDA
using Backend = cuda;
#else
using Backend = cpu;
#endif

int failures = 0;

// The largest |a - b| / max(|b|, 1e-3) over the learners' meta-parameters.
template <class L>
double relative_difference(const L& a, const L& b) {
  double worst = 0;
  const auto sa = a.state(), sb = b.state();
  for (std::size_t i = 0; i < sa.size(); ++i) {
    const auto va = sa[i].second->to_vector(), vb = sb[i].second->to_vector();
    for (std::size_t j = 0; j < va.size(); ++j)
      worst = std::max(worst, std::abs(static_cast<double>(va[j]) - static_cast<double>(vb[j])) /
                                  std::max(std::abs(static_cast<double>(vb[j])), 1e-3));
  }
  return worst;
}

// Trains `make()` for `steps` steps on 2 ranks and (on rank 0) in one
// process, from the same seed, and compares; then rank 0 alone loads the
// training state it wrote (meta-parameters, Adam's moments and step),
// distribute gives it to the other rank, both train on, and the result is
// compared with one process resumed from it.
template <class Make>
void check_parity(const std::string& what, Make make, double tolerance,
                  const std::shared_ptr<Communicator>& world, const std::filesystem::path& dir) {
  using Scalar = typename decltype(make())::T;
  const data::SinusoidLineSampler<Scalar, Backend> sampler({.support = 5, .query = 5});
  // 5 tasks: slices of 3 and 2, so the ranks' shares differ.
  const TrainingLoop loop{.steps = 200, .meta_batch = 5, .name = what};
  auto distributed = make();
  distributed.distribute(world);
  Generator gen(11);
  meta_train(distributed, sampler, gen, loop);
  const auto file = dir / fmt::format("{}.safetensors", what);
  if (world->rank() == 0) io::save_training_state(file, distributed, gen);
  MPI_Barrier(MPI_COMM_WORLD);  // the file is whole before any rank reads it

  auto resumed = make();
  Generator more = gen;  // every rank drew the same batches
  if (world->rank() == 0) more = io::load_training_state(file, resumed).generator;
  resumed.distribute(world);
  meta_train(resumed, sampler, more, loop);

  if (world->rank() != 0) return;
  auto alone = make();
  Generator alone_gen(11);
  meta_train(alone, sampler, alone_gen, loop);
  auto alone_resumed = make();
  Generator alone_more = io::load_training_state(file, alone_resumed).generator;
  meta_train(alone_resumed, sampler, alone_more, loop);
  auto fresh = make();
  const double trained = relative_difference(distributed, alone),
               continued = relative_difference(resumed, alone_resumed),
               moved = relative_difference(fresh, alone);
  const bool ok = trained <= tolerance && continued <= tolerance && moved > 100 * tolerance;
  fmt::print(
      "{} {}: 2 ranks vs 1 process, largest relative difference {:.3g} after {} steps, "
      "{:.3g} after resuming from a checkpoint (tolerance {:.0e}); training moved the "
      "meta-parameters by {:.3g}\n",
      ok ? "ok" : "FAILED", what, trained, loop.steps, continued, tolerance, moved);
  if (!ok) ++failures;
}

template <class T>
void check_learners(const std::shared_ptr<Communicator>& world, const std::filesystem::path& dir,
                    double tolerance) {
  const auto model =
      nn::mlp({.inputs = 1, .hidden = {8, 8}, .outputs = 1, .activation = nn::Activation::tanh});
  const std::string type = sizeof(T) == 4 ? "float" : "double";
  check_parity(
      "maml_" + type,
      [&] {
        Generator init(7);
        return Maml<nn::Sequential, MseLoss, T, Backend>(
            model, MseLoss{},
            {.inner_loop = {.steps = 2, .learning_rate = 0.01}, .driver = {.threads = 1}}, init);
      },
      tolerance, world, dir);
  check_parity(
      "platipus_" + type,
      [&] {
        Generator init(7);
        return Platipus<nn::Sequential, MseLoss, T, Backend>(
            model, MseLoss{},
            {.inner_loop = {.steps = 2, .learning_rate = 0.01},
             .kl_weight = 0.1,
             .driver = {.threads = 1}},
            init);
      },
      tolerance, world, dir);
}

// Rank 1 meets a batch of the wrong shape; rank 0 would wait in its next
// all-reduce for ever if rank 1 did not abort.
void fail_on_one_rank(const std::shared_ptr<Communicator>& world) {
  Generator init(7), gen(8);
  Maml<nn::Sequential, MseLoss, float, Backend> maml(
      nn::mlp({.inputs = 1, .hidden = {8}, .outputs = 1}), MseLoss{},
      {.inner_loop = {.learning_rate = 0.01}, .driver = {.threads = 1}}, init);
  maml.distribute(world);
  const data::SinusoidLineSampler<float, Backend> sampler({.support = 5, .query = 5});
  for (int step = 1; step < 1'000'000; ++step) {
    auto batch = sampler.sample(4, gen);
    if (world->rank() == 1 && step == 3)
      batch.query_x = Tensor<float, Backend>::zeros(Shape{4, 5, 2});
    maml.meta_train_step(batch, gen);
  }
}

// The ranks as the backend reduces over them.
std::shared_ptr<Communicator> world_of(std::shared_ptr<MpiCommunicator> mpi) {
#ifdef PLATIPUS_DISTRIBUTED_ON_CUDA
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("rank %d: no CUDA device: skipping\n", mpi->rank());
    std::exit(77);
  }
  auto world = device_communicator(std::move(mpi));
  std::printf("rank %d: %s\n", world->rank(), std::string(world->name()).c_str());
  return world;
#else
  return mpi;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto world = world_of(std::make_shared<MpiCommunicator>());
  try {
    check(world->size() == 2, "distributed_test", "run it on 2 ranks (mpirun -np 2), not {}",
          world->size());
    if (mode == "parity" && argc > 2) {
      check_learners<float>(world, argv[2], 1e-5);
      check_learners<double>(world, argv[2], 1e-10);
    } else if (mode == "fail") {
      fail_on_one_rank(world);
    } else {
      fail("distributed_test", "usage: distributed_test parity DIR | fail");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", world->rank(), e.what());
    std::fflush(stderr);
    world->abort(1);
  }
  return failures == 0 ? 0 : 1;
}
