// Everything platipus offers on the CPU. The CUDA backend is opt-in:
// include "platipus/backend/cuda/cuda.hpp" to name platipus::cuda.
#pragma once

#include "platipus/autodiff.hpp"
#include "platipus/core/memory.hpp"
#include "platipus/data/circles.hpp"
#include "platipus/data/sinusoid_line.hpp"
#include "platipus/meta/algorithms/anil.hpp"
#include "platipus/meta/algorithms/maml.hpp"
#include "platipus/meta/algorithms/maml_plus_plus.hpp"
#include "platipus/meta/algorithms/meta_sgd.hpp"
#include "platipus/meta/algorithms/platipus.hpp"
#include "platipus/meta/algorithms/reptile.hpp"
#include "platipus/meta/driver/learner_set.hpp"
#include "platipus/meta/driver/memory_check.hpp"
#include "platipus/meta/driver/predict.hpp"
#include "platipus/meta/driver/training.hpp"
#include "platipus/meta/scores/ambiguity.hpp"
#include "platipus/meta/scores/evaluation.hpp"
#include "platipus/meta/scores/uncertainty.hpp"
#include "platipus/nn/losses.hpp"
#include "platipus/nn/sequential.hpp"
#include "platipus/optim/optimizers.hpp"
