#!/usr/bin/env bash
# The Python package's overhead, side by side in one run: MAML 1-40-40-1 and
# PLATIPUS on the paper's network, one meta-step at a time from Python
# (peers/meta_step.py --framework platipus) against the C++ benchmark of the
# same workload (platipus_benchmarks), in alternating rounds, beside the
# PyTorch loop and JAX. From the repository root, after the C++ release build
# and `pip install .` (docs/python.md):
#
#   benchmarks/python_overhead.sh PACKAGE_PYTHON [TORCH_PYTHON [JAX_PYTHON [ROUNDS]]]
#
# Prints one JSON line per measurement (ms per step, the median of its
# repeats) and then, per workload, the median over rounds of each side.
set -euo pipefail
PACKAGE_PYTHON=$1
TORCH_PYTHON=${2:-}
JAX_PYTHON=${3:-}
ROUNDS=${4:-5}
BENCH=${BENCH:-build/release/benchmarks/platipus_benchmarks}
source benchmarks/peers/rounds.sh

for round in $(seq "$ROUNDS"); do
  for workload in "maml small maml_sinusoid/0" "platipus paper platipus_sinusoid/paper_network"; do
    set -- $workload
    repeats=$([ "$2" = small ] && echo 400 || echo 40)
    platipus_benchmark "$3" "$1" "$2" "platipus C++" | tee -a "$lines"
    "$PACKAGE_PYTHON" "$peer" --framework platipus --algorithm "$1" --network "$2" --warmup 3 \
      --repeats "$repeats" | tee -a "$lines"
    peer_torch loop "$1" "$2" | tee -a "$lines"
    peer_jax "$1" "$2" | tee -a "$lines"
  done
done

summarize "$lines" "platipus C++"
