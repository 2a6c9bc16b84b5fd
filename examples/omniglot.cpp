// Few-shot Omniglot (MAML, Finn et al. 2017, Section 5.2; Vinyals et al.'s
// split, each rotation of a character a class): meta-trains MAML (and, with
// --learners, MAML + noise and PLATIPUS) on N-way K-shot tasks of the
// training characters with MAML's network (conv4, 64 filters, 28 x 28) and
// reports accuracy on held-out episodes of the test characters, with 95%
// intervals.
//
//   omniglot --data-dir DIR [--ways 5] [--shots 1] [--quick] [--out DIR] ...
//   omniglot --data-dir DIR --eval-only --checkpoint DIR/checkpoint.safetensors
#include "few_shot_images.hpp"

int main(int argc, char** argv) {
  examples::FewShotOptions o;
  // MAML's 5-way settings (Finn et al. 2017, Appendix A.1): one inner step of
  // 0.4 in training, three at test, meta-batch 32, stride-2 convolutions (its
  // 20-way runs take 5 steps of 0.1 and meta-batch 16).
  o.inner_loop.steps = 1;
  o.inner_loop.learning_rate = 0.4;
  o.inner_loop.evaluation_steps = 3;
  o.meta_batch = 32;
  o.strided = true;
  o.filters = 64;
  o.learners = "maml";
  // PLATIPUS and MAML + noise, when chosen: the circles example's
  // classification settings (query likelihood averaged over a task's
  // points); the noise moves the weights in one step of 0.4 by 0.03, as
  // five steps of 0.01 with the circles' 1.5 do (PLATIPUS's initial prior
  // standard deviation).
  o.kl_weight = 0.01;
  o.gamma = 0.4;
  o.query_reduction = platipus::Reduction::mean;
  o.inner_loop.gradient_noise = 0.075;
  return examples::few_shot_main(
      {.name = "omniglot",
       .description = "Few-shot Omniglot: N-way K-shot MAML (and PLATIPUS) with conv4 (Finn et "
                      "al. 2017)",
       .data_variable = "PLATIPUS_OMNIGLOT_DIR",
       .layout = "images_background/, images_evaluation/ and splits/vinyals/",
       .train_split = "train",
       .test_split = "test",
       .channels = 1,
       .size = 28,
       .evaluation_chunk = 20,
       .load =
           [](const auto& root, auto split, const auto& cache, auto* report) {
             return platipus::data::load_omniglot(root, split, cache, report);
           }},
      o, argc, argv);
}
