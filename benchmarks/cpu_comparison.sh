#!/usr/bin/env bash
# Side-by-side CPU timings of one meta-step: platipus (Google Benchmark) and
# the same workloads in PyTorch (per-task loop, vmap) and JAX (jit + vmap),
# run one after the other on this machine. Run from the repository root after
# `cmake --build --preset release`:
#
#   benchmarks/cpu_comparison.sh [TORCH_PYTHON [JAX_PYTHON]]
#
# TORCH_PYTHON defaults to /usr/bin/python3 (Debian's python3-torch); give a
# JAX_PYTHON (e.g. a venv with `pip install jax`) to include JAX.
set -uo pipefail
TORCH_PYTHON=${1:-/usr/bin/python3}
JAX_PYTHON=${2:-}
BENCH=${BENCH:-build/release/benchmarks/platipus_benchmarks}
peer=benchmarks/peers/meta_step.py

echo "platipus:"
"$BENCH" --benchmark_filter='maml_sinusoid/0|platipus_sinusoid|maml_conv4' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true 2>/dev/null | grep -E '_median'
for workload in "maml small" "platipus small" "platipus paper" "maml conv4-miniimagenet" "maml conv4-omniglot"; do
  set -- $workload
  for mode in loop vmap; do
    "$TORCH_PYTHON" "$peer" --framework torch --mode "$mode" --algorithm "$1" --network "$2" \
      --threads "$(nproc)" --warmup 1 --repeats 5 2>/dev/null | tail -1
  done
  if [ -n "$JAX_PYTHON" ]; then
    "$JAX_PYTHON" "$peer" --framework jax --algorithm "$1" --network "$2" --warmup 1 --repeats 5 2>/dev/null | tail -1
  fi
done
