// What the meta-learner driver (meta/driver/meta_learner.hpp) reads from
// every learner's settings, whatever the algorithm: how it updates the
// meta-parameters and how it spreads a meta-batch over threads. Each
// algorithm's settings hold one as `driver`:
//
//   MamlSettings{.inner_loop = {.steps = 5},
//                .driver = {.meta_optimizer = {.learning_rate = 1e-3}, .threads = 2}}
#pragma once

#include <string_view>

#include "platipus/meta/driver/task_parallel.hpp"
#include "platipus/optim/optimizers.hpp"

namespace platipus {

struct DriverSettings {
  // Adam on the meta-parameters; annealing_steps > 0 anneals its learning
  // rate along a cosine (MAML++; optim/optimizers.hpp).
  optim::AdamSettings meta_optimizer{};
  int threads = 0;  // threads over the tasks of a meta-batch; 0: B::default_threads()
  // Chunks a meta-batch is cut into (meta/driver/task_parallel.hpp, chunks_of): 0,
  // the backend's cut (CPU: one per task); N > 0, N chunks; both give the same
  // bits on any number of threads. one_chunk_per_thread (-1) is sometimes
  // faster and agrees across thread counts only to rounding.
  int task_chunks = 0;

  // Throws platipus::error naming `who` and the bad setting.
  void validate(std::string_view who) const {
    check_non_negative(who, "driver.threads", threads, "0: the backend's default");
    check(task_chunks >= one_chunk_per_thread, who,
          "driver.task_chunks must be 0 (the backend's cut), N > 0 or one_chunk_per_thread "
          "(-1), got {}",
          task_chunks);
    check_non_negative(who, "driver.meta_optimizer.annealing_steps",
                       meta_optimizer.annealing_steps);
    check(meta_optimizer.annealing_steps == 0 ||
              (meta_optimizer.final_learning_rate >= 0 &&
               meta_optimizer.final_learning_rate <= meta_optimizer.learning_rate),
          who,
          "driver.meta_optimizer.final_learning_rate must be in [0, "
          "driver.meta_optimizer.learning_rate = {}], got {}",
          meta_optimizer.learning_rate, meta_optimizer.final_learning_rate);
  }
};

}  // namespace platipus
