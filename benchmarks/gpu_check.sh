#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in one run of a few minutes:
# tool versions, a Release build with CUDA, the cuda-labelled tests, short
# runs of the examples' CUDA builds, the GPU benchmark, and the PyTorch / JAX
# peers on the same workloads. Run from the repository root with OUT set to
# an output folder:
#
#   OUT=/tmp/gpu-check benchmarks/gpu_check.sh
#
# Writes $OUT/summary.txt and the raw logs beside it (build.log, ctest.log,
# examples.log and examples/, benchmark.log, benchmark.json, peers.log,
# peers.jsonl). Every step has a time limit inside an overall deadline
# (DEADLINE seconds, default 540), so the script ends in time even when a
# step hangs; a failed step is reported and the next one still runs where it
# can.
set -uo pipefail

: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
BUILD=${BUILD:-build/gpu-check}
JOBS=${JOBS:-$(nproc)}
ARCH=${CUDA_ARCH:-90}  # H100 and H200
DEADLINE=${DEADLINE:-540}
PYTHON=${PYTHON:-python3}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
SUMMARY=$OUT/summary.txt
START=$SECONDS

say() { echo "$*" | tee -a "$SUMMARY"; }

# run LIMIT LOG COMMAND...: runs COMMAND for at most LIMIT seconds (less when
# the deadline is nearer), appending its output to LOG; says how it went.
run() {
  local limit=$1 log=$2
  shift 2
  local left=$((DEADLINE - (SECONDS - START)))
  ((left < limit)) && limit=$left
  if ((limit <= 5)); then
    say "  skipped (deadline): $*"
    return 124
  fi
  local begin=$SECONDS status
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1
  status=$?
  say "  exit $status after $((SECONDS - begin)) s: $*"
  ((status == 0)) || tail -5 "$log" | sed 's/^/    | /' | tee -a "$SUMMARY"
  return $status
}

: >"$SUMMARY"
say "platipus CUDA check, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
say ""
say "== versions"
{
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
  echo "nvcc: $("$NVCC" --version 2>&1 | grep -o 'release [0-9.]*, V[0-9.]*')"
  echo "g++: $(g++ --version | head -1)"
  echo "cmake: $(cmake --version | head -1)"
  echo "cores: $(nproc)"
  for pkg in libeigen3-dev libfmt-dev catch2 nlohmann-json3-dev libbenchmark-dev libcudnn9-dev-cuda-13; do
    echo "$pkg: $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo 'not installed (as a package)')"
  done
  "$PYTHON" - <<'PY' 2>&1
import importlib
for name in ("torch", "jax"):
    try:
        m = importlib.import_module(name)
        extra = ""
        if name == "torch":
            extra = f", cuda available {m.cuda.is_available()}, cuDNN {m.backends.cudnn.version()}"
        else:
            extra = f", devices {m.devices()}"
        print(f"{name}: {m.__version__}{extra}")
    except Exception as e:  # report and go on: the peers are optional
        print(f"{name}: unavailable ({type(e).__name__}: {e})")
PY
} | tee -a "$SUMMARY"

say ""
say "== configure and build (CUDA architectures $ARCH, -j$JOBS)"
configure() {
  run 120 "$OUT/build.log" cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPLATIPUS_WITH_CUDA=ON \
    -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DPLATIPUS_BUILD_EXAMPLES="$1" \
    -DPLATIPUS_BUILD_BENCHMARKS="$2"
}
# Google Benchmark and CLI11 are optional here: without them only the GPU
# benchmark or the examples' CUDA runs are lost.
examples=ON
bench=ON
if ! configure ON ON; then
  examples=OFF
  say "  configuring again without the examples"
  if ! configure OFF ON; then
    bench=OFF
    say "  configuring again without the benchmarks"
    configure OFF OFF
  fi
fi
targets=(platipus_cuda_tests)
[[ $bench == ON ]] && targets+=(platipus_cuda_benchmarks)
[[ $examples == ON ]] && targets+=(sine_line_cuda circles_cuda active_learning_cuda)
built=no
if run 360 "$OUT/build.log" cmake --build "$BUILD" -j"$JOBS" --target "${targets[@]}"; then
  built=yes
else
  say "  build failed; the end of build.log:"
  tail -25 "$OUT/build.log" | sed 's/^/    /' | tee -a "$SUMMARY" >/dev/null
fi

if [[ $built == yes ]]; then
  say ""
  say "== ctest -L cuda"
  run 240 "$OUT/ctest.log" ctest --test-dir "$BUILD" -L cuda --output-on-failure
  grep -E 'tests passed|tests failed|Skipped|Failed|Passed|test cases|assertions' "$OUT/ctest.log" | sed 's/^/  /' |
    tee -a "$SUMMARY" >/dev/null

  if [[ $examples == ON ]]; then
    say ""
    say "== the examples on platipus::cuda (--quick, 50 steps)"
    for example in sine_line circles; do
      run 60 "$OUT/examples.log" "$BUILD/examples/${example}_cuda" --quick --steps 50 --eval-tasks 50 --no-plot \
        --out "$OUT/examples/$example"
    done
    run 60 "$OUT/examples.log" "$BUILD/examples/active_learning_cuda" --eval-only \
      --checkpoint "$OUT/examples/sine_line/checkpoint.safetensors" --tasks 20 --no-plot --out "$OUT/examples/active_learning"
  fi

  if [[ $bench == ON ]]; then
    say ""
    say "== GPU benchmark (platipus::cuda, float, 25 tasks x 10 + 10 points, 5 inner steps)"
    run 150 "$OUT/benchmark.log" "$BUILD/benchmarks/platipus_cuda_benchmarks" \
      --benchmark_out="$OUT/benchmark.json" --benchmark_out_format=json
  fi
fi

say ""
say "== peers on the GPU (benchmarks/peers/meta_step.py --device cuda)"
for workload in "maml small" "platipus small" "platipus paper"; do
  read -r algorithm network <<<"$workload"
  for peer in "torch loop" "torch vmap" "jax jit"; do
    read -r framework mode <<<"$peer"
    run 100 "$OUT/peers.log" "$PYTHON" benchmarks/peers/meta_step.py --framework "$framework" --mode "$mode" \
      --algorithm "$algorithm" --network "$network" --device cuda --warmup 2 --repeats 5
  done
done
grep '^{"framework"' "$OUT/peers.log" >"$OUT/peers.jsonl"

say ""
say "== meta-step times, ms (median for peers; mean for platipus, per thread count and replayed as a CUDA graph)"
"$PYTHON" - "$OUT" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, os, sys
out = sys.argv[1]
rows = {}
path = os.path.join(out, "benchmark.json")
try:
    benchmarks = json.load(open(path)).get("benchmarks", [])
except (OSError, ValueError) as e:
    print(f"no GPU benchmark results ({type(e).__name__})")
    benchmarks = []
for b in benchmarks:
    name = b["name"]  # e.g. cuda_maml_sinusoid/first_order:0/threads:4/real_time
    if "first_order:1" in name or "real_time" not in b:
        continue
    threads = next((p.split(":")[1] for p in name.split("/") if p.startswith("threads:")), "?")
    key = ("maml", "small") if "maml" in name else ("platipus", "paper" if "paper" in name else "small")
    label = "platipus::cuda graph" if "_graph" in name else f"platipus::cuda {threads} threads"
    rows.setdefault(key, {})[label] = b["real_time"]
path = os.path.join(out, "peers.jsonl")
if os.path.exists(path):
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        rows.setdefault((r["algorithm"], r["network"]), {})[f"{r['framework']} {r['mode']}"] = r["ms_per_step"]
for (algorithm, network), times in sorted(rows.items()):
    print(f"{algorithm} {network}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(times.items())))
PY
say ""
say "done in $((SECONDS - START)) s"
