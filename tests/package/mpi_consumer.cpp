// Uses platipus::mpi the way a downstream program does: one process when
// started directly, the ranks of MPI_COMM_WORLD under mpirun; a MAML learner
// distributed over them takes one step. Exits non-zero on any error.
#include <cstdio>
#include <memory>

#include <platipus/distributed/mpi.hpp>
#include <platipus/platipus.hpp>

int main() {
  using namespace platipus;
  Generator init(1), gen(2);
  Maml<nn::Sequential, MseLoss> maml(nn::mlp({.inputs = 1, .hidden = {8}, .outputs = 1}), MseLoss{},
                                     {.inner_loop = {.learning_rate = 0.01}}, init);
  std::shared_ptr<MpiCommunicator> world;
  if (launched_by_mpi()) {
    world = std::make_shared<MpiCommunicator>();
    maml.distribute(world);
  }
  const auto result = maml.meta_train_step(data::SinusoidLineSampler<float>().sample(4, gen), gen);
  std::printf("rank %d of %d: one meta-step, query loss %.3f\n", world ? world->rank() : 0,
              world ? world->size() : 1, result.query_loss);
  return 0;
}
