// 5-way 1-shot MiniImagenet, the paper's Table 2 (Finn, Xu, Levine 2018,
// Appendix C): MAML and PLATIPUS with MAML's network (conv4, 32 filters,
// 84 x 84 RGB) and settings (meta-batch 4, 5 inner steps of 0.01 in
// training and 10 at test, 15 queries per class), accuracy on 600 test
// episodes with 95% intervals; PLATIPUS predicts with the mean softmax of
// --samples sampled models (10).
//
//   miniimagenet --data-dir DIR [--quick] [--out DIR] [--steps 60000] ...
//   miniimagenet --data-dir DIR --eval-only --checkpoint DIR/checkpoint.safetensors
#include "few_shot_images.hpp"

int main(int argc, char** argv) {
  examples::FewShotOptions o;
  o.inner_loop.steps = 5;
  o.inner_loop.learning_rate = 0.01;
  o.inner_loop.evaluation_steps = 10;
  o.meta_batch = 4;
  o.queries = 15;
  o.filters = 32;
  o.learners = "maml,platipus";
  // PLATIPUS: the lowest KL weight of the paper's CelebA search, the query
  // likelihood averaged over a task's points, gammas starting at alpha.
  o.kl_weight = 0.05;
  o.gamma = 0.01;
  o.query_reduction = platipus::Reduction::mean;
  o.inner_loop.gradient_noise = 1.5;  // moves the weights by about 0.03 over 5 steps of 0.01
  return examples::few_shot_main(
      {.name = "miniimagenet",
       .description = "5-way 1-shot MiniImagenet: MAML vs PLATIPUS with conv4 (Finn, Xu, Levine "
                      "2018, Table 2)",
       .data_variable = "PLATIPUS_MINIIMAGENET_DIR",
       .layout = "train.csv, val.csv, test.csv and images/",
       .train_split = "train",
       .test_split = "test",
       .channels = 3,
       .size = 84,
       .evaluation_chunk = 1,
       .load =
           [](const auto& root, auto split, const auto& cache, auto* report) {
             return platipus::data::load_miniimagenet(root, split, cache, report);
           }},
      o, argc, argv);
}
