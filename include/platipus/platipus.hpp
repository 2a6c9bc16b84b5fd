// Everything platipus offers on the CPU. The CUDA backend is opt-in:
// include "platipus/backend/cuda/cuda.hpp" to name platipus::cuda.
#pragma once

#include "platipus/autodiff.hpp"
#include "platipus/core/memory.hpp"
#include "platipus/data/circles.hpp"
#include "platipus/data/sinusoid_line.hpp"
#include "platipus/meta/ambiguity.hpp"
#include "platipus/meta/anil.hpp"
#include "platipus/meta/evaluation.hpp"
#include "platipus/meta/learner_set.hpp"
#include "platipus/meta/maml.hpp"
#include "platipus/meta/maml_plus_plus.hpp"
#include "platipus/meta/memory_check.hpp"
#include "platipus/meta/meta_sgd.hpp"
#include "platipus/meta/platipus.hpp"
#include "platipus/meta/predict.hpp"
#include "platipus/meta/reptile.hpp"
#include "platipus/meta/training.hpp"
#include "platipus/meta/uncertainty.hpp"
#include "platipus/nn/losses.hpp"
#include "platipus/nn/sequential.hpp"
#include "platipus/optim/optimizers.hpp"
