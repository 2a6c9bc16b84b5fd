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
peer=benchmarks/peers/meta_step.py
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT

cpp() {  # $1: the benchmark's name; $2 $3: algorithm and network
  "$BENCH" --benchmark_filter="^$1(/real_time)?\$" --benchmark_min_time=2 --benchmark_format=json 2>/dev/null |
    python3 -c "import json, sys; b = json.load(sys.stdin)['benchmarks'][0]; print(json.dumps(
        {'framework': 'platipus C++', 'algorithm': '$2', 'network': '$3',
         'ms_per_step': round(b['real_time'], 3)}))"
}

for round in $(seq "$ROUNDS"); do
  for workload in "maml small maml_sinusoid/0" "platipus paper platipus_sinusoid/paper_network"; do
    set -- $workload
    repeats=$([ "$2" = small ] && echo 400 || echo 40)
    cpp "$3" "$1" "$2" | tee -a "$lines"
    "$PACKAGE_PYTHON" "$peer" --framework platipus --algorithm "$1" --network "$2" --warmup 3 \
      --repeats "$repeats" | tee -a "$lines"
    if [ -n "$TORCH_PYTHON" ]; then
      "$TORCH_PYTHON" "$peer" --framework torch --mode loop --algorithm "$1" --network "$2" \
        --threads "$(nproc)" --warmup 1 --repeats 5 2>/dev/null | tail -1 | tee -a "$lines"
    fi
    if [ -n "$JAX_PYTHON" ]; then
      "$JAX_PYTHON" "$peer" --framework jax --algorithm "$1" --network "$2" --warmup 2 \
        --repeats 20 2>/dev/null | tail -1 | tee -a "$lines"
    fi
  done
done

python3 - "$lines" <<'SUMMARY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for workload in sorted({(r["algorithm"], r["network"]) for r in rows}):
    sides = {}
    for r in rows:
        if (r["algorithm"], r["network"]) == workload:
            side = r["framework"] + (" " + r["mode"] if "mode" in r else "")
            sides.setdefault(side, []).append(r["ms_per_step"])
    cpp = statistics.median(sides["platipus C++"])
    print(f"{workload[0]} {workload[1]}:")
    for side, times in sides.items():
        median = statistics.median(times)
        print(f"  {side:<22} {median:9.3f} ms  ({median / cpp:.3f} x C++; rounds {times})")
SUMMARY
