// Reverse-mode autodiff: tapes, Vars, every differentiable op, grad and the
// gradient checks.
#pragma once

#include "platipus/autodiff/grad.hpp"
#include "platipus/autodiff/gradcheck.hpp"
#include "platipus/autodiff/ops/activations.hpp"
#include "platipus/autodiff/ops/arithmetic.hpp"
#include "platipus/autodiff/ops/broadcast.hpp"
#include "platipus/autodiff/ops/concat.hpp"
#include "platipus/autodiff/ops/exp_log.hpp"
#include "platipus/autodiff/ops/flatten.hpp"
#include "platipus/autodiff/ops/foreach.hpp"
#include "platipus/autodiff/ops/index.hpp"
#include "platipus/autodiff/ops/linear.hpp"
#include "platipus/autodiff/ops/matmul.hpp"
#include "platipus/autodiff/ops/power.hpp"
#include "platipus/autodiff/ops/reduce.hpp"
#include "platipus/autodiff/ops/reshape.hpp"
#include "platipus/autodiff/ops/softmax.hpp"
#include "platipus/autodiff/ops/unfold.hpp"
#include "platipus/autodiff/ops/where.hpp"
#include "platipus/autodiff/tape.hpp"
