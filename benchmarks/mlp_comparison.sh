#!/usr/bin/env bash
# The three MLP workloads (second-order MAML 1-40-40-1, PLATIPUS 1-40-40-1,
# PLATIPUS on the paper's network), platipus (Google Benchmark, both cores)
# against the PyTorch loop, PyTorch vmap and JAX (jit + vmap), in alternating
# rounds of one sitting: each round runs every side once, so a drift of the
# machine's speed meets all of them. From the repository root, after
# `cmake --build --preset release`:
#
#   benchmarks/mlp_comparison.sh [TORCH_PYTHON [JAX_PYTHON [ROUNDS]]]
#
# Prints one JSON line per measurement (ms per step; peak resident memory,
# MB) and then, per workload, each side's median over the rounds and JAX's
# time over ours.
set -euo pipefail
TORCH_PYTHON=${1:-/usr/bin/python3}
JAX_PYTHON=${2:-}
ROUNDS=${3:-5}
BENCH=${BENCH:-build/release/benchmarks/platipus_benchmarks}
source benchmarks/peers/rounds.sh

for round in $(seq "$ROUNDS"); do
  for workload in "maml small maml_sinusoid/0" "platipus small platipus_sinusoid/1-40-40-1" \
    "platipus paper platipus_sinusoid/paper_network"; do
    set -- $workload
    platipus_benchmark "$3" "$1" "$2" platipus | tee -a "$lines"
    for mode in loop vmap; do peer_torch "$mode" "$1" "$2" | tee -a "$lines"; done
    peer_jax "$1" "$2" | tee -a "$lines"
  done
done

summarize "$lines" platipus
