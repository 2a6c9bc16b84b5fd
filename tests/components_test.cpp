// The components under the meta-learners, each against its definition:
// networks against a forward pass computed by hand from the named pieces of
// the parameters, initialisers against their distributions, the optimisers
// against their update formulas, the samplers against the task families they
// describe, checkpoints and metrics files against what was written, the
// scores by hand, the thread pool and the task split against their
// contracts, and predict and the multi-threaded meta-gradient against their
// single-task, single-thread forms. The tests live in components/, one file
// per folder of include/platipus/ they test; this file makes them one
// translation unit, as few translation units keep CI's build short.
#include "catch.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <csignal>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "derivative_checks.hpp"
#include "platipus/backend/counting.hpp"
#include "platipus/core/stop_signals.hpp"
#include "platipus/io/checkpoint.hpp"
#include "platipus/io/metrics.hpp"
#include "platipus/io/settings_json.hpp"
#include "platipus/io/training_state.hpp"
#include "platipus/platipus.hpp"
#include "temporary_directory.hpp"

using namespace platipus;
using Catch::Contains;
using platipus::testing::check_derivatives;
using V = Var<double>;

#include "components/helpers.hpp"

#include "components/autodiff.hpp"
#include "components/data.hpp"
#include "components/driver.hpp"
#include "components/io.hpp"
#include "components/nn.hpp"
#include "components/optim.hpp"
#include "components/scores.hpp"
