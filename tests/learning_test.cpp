// The meta-learners behave as the papers say: MAML learns to adapt, its
// meta-gradient is second order, and PLATIPUS's samples carry uncertainty
// that shrinks with data. The tests live in learning/, one file per folder
// of include/platipus/meta/ they test; this file makes them one translation
// unit, as few translation units keep CI's build short.
#include "catch.hpp"
#include "derivative_checks.hpp"
#include "resident_memory.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <sstream>

#include <unistd.h>

#include "platipus/backend/counting.hpp"
#include "platipus/io/checkpoint.hpp"
#include "platipus/io/training_run.hpp"
#include "platipus/platipus.hpp"

using namespace platipus;
using platipus::testing::check_part_gradients;

#include "learning/helpers.hpp"

#include "learning/algorithms.hpp"
#include "learning/driver.hpp"
#include "learning/scores.hpp"
