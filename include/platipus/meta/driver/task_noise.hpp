// The random draws of a meta-step, keyed by task. Each task of a meta-batch
// reads Philox under its own stream, a hash of (the step's key, the task's
// index in the batch), so the numbers a task gets depend on the seed, the
// step and the task only: not on how the batch is cut into chunks (threads
// today, processes later) nor on the backend.
//
//   TaskNoise noise(gen);                    // one draw from gen per meta-step
//   auto chunk = noise.from_task(start);     // the tasks [start, ...) of a chunk
//   chunk.normal<T, B>({tasks, ...});        // row t from task start + t
//   chunk.normal<T, B>(shapes);              // one such draw a shape, one call
#pragma once

#include <span>
#include <vector>

#include "platipus/tensor/random.hpp"

namespace platipus {

class TaskNoise {
 public:
  explicit TaskNoise(Generator& gen) : seed_(gen.seed()), key_(gen.bits()) {}

  // The same noise seen from task `first` on: row 0 of the next draw is task `first`'s.
  TaskNoise from_task(std::int64_t first) const {
    TaskNoise chunk = *this;
    chunk.first_ = first;
    return chunk;
  }

  // N(0, 1) of `shape`, whose leading axis runs over tasks: every row comes
  // from its task's stream, at the same position in every stream.
  template <class T, class B>
  Tensor<T, B> normal(const Shape& shape) {
    check(shape.rank() >= 1, "TaskNoise::normal", "the shape {} has no task axis", shape);
    Tensor<T, B> y(shape);
    const std::int64_t tasks = shape[0], row = tasks ? y.numel() / tasks : 0;
    if (row > 0) B::fill_normal_rows(y.data(), tasks, row, seed_, {key_, first_}, block_);
    block_ +=
        static_cast<std::uint64_t>((row + PhiloxDraw<T>::per_block - 1) / PhiloxDraw<T>::per_block);
    return y;
  }

  // normal(shapes[i]) for each i in order, the same tasks leading each, by
  // one backend call per NormalRowsLayout's capacity of pieces where normal
  // makes one a piece: the draws of a model's pieces, with their bits.
  template <class T, class B>
  std::vector<Tensor<T, B>> normal(std::span<const Shape> shapes) {
    std::vector<Tensor<T, B>> y;
    y.reserve(shapes.size());
    NormalRowsLayout<T> l;
    const auto launch = [&] {
      if (l.count > 0) B::foreach_fill_normal_rows(l, seed_, {key_, first_});
      l.count = 0;
    };
    for (const Shape& shape : shapes) {
      check(shape.rank() >= 1, "TaskNoise::normal", "the shape {} has no task axis", shape);
      check(shape[0] == shapes[0][0], "TaskNoise::normal",
            "the shape {} has {} tasks where the first has {}", shape, shape[0], shapes[0][0]);
      y.emplace_back(shape);
      l.rows = shape[0];
      const std::int64_t row = l.rows ? y.back().numel() / l.rows : 0;
      if (row > 0) {
        const auto k = static_cast<std::size_t>(l.count++);
        l.y[k] = y.back().data();
        l.n[k] = row;
        l.block[k] = block_;
        if (l.count == NormalRowsLayout<T>::capacity) launch();
      }
      block_ += static_cast<std::uint64_t>((row + PhiloxDraw<T>::per_block - 1) /
                                           PhiloxDraw<T>::per_block);
    }
    launch();
    return y;
  }

 private:
  std::uint64_t seed_, key_;
  std::int64_t first_ = 0;
  std::uint64_t block_ = 0;
};

}  // namespace platipus
