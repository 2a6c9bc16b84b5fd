// Uses platipus::mpi the way a downstream program does: one process when
// started directly, the ranks of MPI_COMM_WORLD under mpirun; a tensor summed
// over the ranks holds size times its value. Exits non-zero otherwise.
#include <cstdio>
#include <memory>
#include <span>
#include <vector>

#include <platipus/distributed/mpi.hpp>

int main() {
  using namespace platipus;
  std::shared_ptr<MpiCommunicator> world;
  if (launched_by_mpi()) world = std::make_shared<MpiCommunicator>();
  const int size = world ? world->size() : 1;
  Tensor<float> values = Tensor<float>::from_host(Shape{3}, {1, 2, 3});
  Tensor<float>* tensors[] = {&values};
  if (world) all_reduce_sum(*world, std::span<Tensor<float>* const>(tensors));
  const bool summed =
      values.to_vector() == std::vector<float>{1.0f * size, 2.0f * size, 3.0f * size};
  std::printf("rank %d of %d: the sum over the ranks is %s\n", world ? world->rank() : 0, size,
              summed ? "right" : "wrong");
  return summed ? 0 : 1;
}
