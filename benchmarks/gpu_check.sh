#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in one run of a few minutes:
# tool versions, a Release build with CUDA (or programs built elsewhere by
# benchmarks/gpu_prebuild.sh), the CUDA tests, the examples on the GPU and on
# the CPU side by side, the GPU benchmark, the PyTorch / JAX peers on the same
# workloads, and a kernel profile of a replayed meta-step. Run from the
# repository root with OUT set to an output folder:
#
#   OUT=/tmp/gpu-check benchmarks/gpu_check.sh
#   OUT=/tmp/gpu-check PREBUILT=.device/gpu-check benchmarks/gpu_check.sh
#
# Writes $OUT/summary.txt and beside it at most seven more files: build.log,
# tests.log, examples.tar.gz (every example's output folder and log),
# benchmark.json, peers.jsonl, profile.csv and details.log (every other
# step's output, compute-sanitizer's memcheck of the tests included). Every step has a time limit inside an overall deadline
# (DEADLINE seconds, default 540), so the script ends in time even when a
# step hangs; a failed step is reported and the next one still runs where it
# can. CHECKS picks steps (default "tests examples benchmark peers profile
# sanitizer"), PEER_WORKLOADS the peers' algorithm:network pairs (default
# every sinusoid and conv4 workload), BENCHMARK_FILTER the GPU benchmarks
# (a --benchmark_filter regex, default all), PROFILE_FILTER and
# PROFILE_LAUNCHES the benchmark and the number of kernels that ncu profiles.
set -uo pipefail

: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build/gpu-check}
PREBUILT=${PREBUILT:-}
JOBS=${JOBS:-$(nproc)}
ARCH=${CUDA_ARCH:-90} # H100 and H200
DEADLINE=${DEADLINE:-540}
PYTHON=${PYTHON:-python3}
BENCHMARK_FILTER=${BENCHMARK_FILTER:-.}
PROFILE_FILTER=${PROFILE_FILTER:-cuda_platipus_sinusoid_graph/paper_network}
PROFILE_LAUNCHES=${PROFILE_LAUNCHES:-1000}
CHECKS=${CHECKS:-tests examples benchmark peers profile sanitizer}
PEER_WORKLOADS=${PEER_WORKLOADS:-maml:small platipus:small platipus:paper maml:conv4-miniimagenet maml:conv4-omniglot}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
NCU=${NCU:-$(command -v ncu || true)}
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || true)}
SUMMARY=$OUT/summary.txt
DETAILS=$OUT/details.log
START=$SECONDS

say() { echo "$*" | tee -a "$SUMMARY"; }
checking() { [[ " $CHECKS " == *" $1 "* ]]; }

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
  echo "== $*" >>"$log"
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
  echo "cores: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "ncu: ${NCU:-not found}; compute-sanitizer: ${SANITIZER:-not found}"
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

# The programs: built here by gpu_prebuild.sh, or built elsewhere by it and
# carried in PREBUILT (bin/, and lib/ with the libraries this machine may lack).
built=yes
if [[ -z $PREBUILT ]]; then
  PREBUILT=$BUILD/programs
  say ""
  say "== build (benchmarks/gpu_prebuild.sh, CUDA architectures $ARCH, -j$JOBS)"
  if ! BUILD=$BUILD CUDA_ARCH=$ARCH JOBS=$JOBS run 420 "$OUT/build.log" benchmarks/gpu_prebuild.sh "$PREBUILT"; then
    built=no
    say "  build failed; the end of build.log:"
    tail -25 "$OUT/build.log" | sed 's/^/    /' | tee -a "$SUMMARY" >/dev/null
  fi
fi
if [[ $built == yes ]]; then
  BIN=$(cd "$PREBUILT/bin" && pwd)
  nvidia=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
  export LD_LIBRARY_PATH=$(cd "$PREBUILT/lib" && pwd):/usr/local/cuda/lib64:/usr/local/cuda/lib:$nvidia/cublas/lib:$nvidia/cudnn/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  say ""
  say "== programs in $PREBUILT: $(cat "$PREBUILT/built-from.txt" 2>/dev/null)"
  ldd "$BIN"/* | grep 'not found' | sort -u | sed 's/^/  missing: /' | tee -a "$SUMMARY"
fi

if [[ $built == yes ]] && checking tests; then
  say ""
  say "== the CUDA tests (each test case's time in tests.log)"
  run 150 "$OUT/tests.log" "$BIN/platipus_cuda_tests" --durations yes
  grep -E 'test cases|assertions|FAILED|No tests ran' "$OUT/tests.log" | sort | uniq -c | sed 's/^/  /' |
    tee -a "$SUMMARY" >/dev/null
fi

if [[ $built == yes ]] && checking examples; then
  say ""
  say "== the examples: sine_line on the GPU and on the CPU, 1000 steps each; circles and active learning on the GPU"
  ex=$OUT/examples
  mkdir -p "$ex"
  for program in sine_line_cuda sine_line; do
    run 60 "$ex/examples.log" "$BIN/$program" --quick --steps 1000 --eval-tasks 200 --no-plot --out "$ex/$program"
  done
  run 30 "$ex/examples.log" "$BIN/circles_cuda" --quick --no-plot --out "$ex/circles_cuda"
  run 30 "$ex/examples.log" "$BIN/active_learning_cuda" --eval-only \
    --checkpoint "$ex/sine_line_cuda/checkpoint.safetensors" --tasks 20 --no-plot --out "$ex/active_learning_cuda"
  "$PYTHON" - "$ex" <<'PY' 2>&1 | tee -a "$SUMMARY"
import json, os, sys
for program in ("sine_line_cuda", "sine_line"):
    try:
        results = json.load(open(os.path.join(sys.argv[1], program, "results.json")))["results"]
    except (OSError, ValueError, KeyError) as e:
        print(f"  {program}: no results ({type(e).__name__})")
        continue
    cells = []
    for learner in ("maml", "maml_noise", "platipus"):
        r = results.get(learner, {})
        cells.append(f"{learner} " + " ".join(
            f"{k} {r[k]['mean']:.3f}+-{r[k]['ci95']:.3f}" for k in ("mse", "nll") if k in r))
    print(f"  {program}: " + "; ".join(cells))
PY
  tar -czf "$OUT/examples.tar.gz" -C "$OUT" examples && rm -rf "$ex"
fi

if [[ $built == yes ]] && checking benchmark; then
  say ""
  say "== GPU benchmark (platipus::cuda, float, 25 tasks x 10 + 10 points, 5 inner steps)"
  run 120 "$DETAILS" "$BIN/platipus_cuda_benchmarks" --benchmark_min_time=0.3 --benchmark_filter="$BENCHMARK_FILTER" \
    --benchmark_out="$OUT/benchmark.json" --benchmark_out_format=json
fi

if checking peers; then
say ""
say "== peers on the GPU (benchmarks/peers/meta_step.py --device cuda, one process): $PEER_WORKLOADS"
export XLA_PYTHON_CLIENT_PREALLOCATE=false
run 240 "$DETAILS" "$PYTHON" - "$OUT/peers.jsonl" $PEER_WORKLOADS <<'PY'
import json, sys, traceback
sys.path.insert(0, "benchmarks/peers")
import meta_step
with open(sys.argv[1], "w") as out:
    for algorithm, network in (w.split(":") for w in sys.argv[2:]):
        for framework, mode in (("torch", "loop"), ("torch", "vmap"), ("jax", "jit")):
            argv = ["--framework", framework, "--mode", mode, "--algorithm", algorithm, "--network", network,
                    "--device", "cuda", "--warmup", "3",
                    "--repeats", "10" if framework == "torch" else "20" if "conv" in network else "50"]
            try:
                line = json.dumps(meta_step.measure(meta_step.parser().parse_args(argv)))
            except Exception:
                traceback.print_exc()
                continue
            print(line, flush=True)
            out.write(line + "\n")
            out.flush()
PY
fi

if [[ $built == yes && -n $NCU ]] && checking profile; then
  say ""
  say "== kernel profile of $PROFILE_FILTER (ncu, the first $PROFILE_LAUNCHES kernels)"
  run 90 "$DETAILS" "$NCU" --csv --metrics gpu__time_duration.sum --launch-count "$PROFILE_LAUNCHES" \
    --log-file "$OUT/profile.csv" "$BIN/platipus_cuda_benchmarks" \
    --benchmark_filter="$PROFILE_FILTER" --benchmark_min_time=0.05
fi

if [[ $built == yes && -n $SANITIZER ]] && checking sanitizer; then
  say ""
  say "== the CUDA tests under compute-sanitizer memcheck (the last step: it may run out of time)"
  run 150 "$DETAILS" "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 9 "$BIN/platipus_cuda_tests"
  grep -E 'ERROR SUMMARY|test cases' "$DETAILS" | tail -2 | sed 's/^/  /' | tee -a "$SUMMARY" >/dev/null
fi

say ""
say "== meta-step times, ms (median for peers; mean for platipus, per thread count and replayed as a CUDA graph)"
"$PYTHON" - "$OUT" <<'PY' 2>&1 | tee -a "$SUMMARY"
import collections, csv, json, os, sys
out = sys.argv[1]
rows = {}
try:
    benchmarks = json.load(open(os.path.join(out, "benchmark.json"))).get("benchmarks", [])
except (OSError, ValueError) as e:
    print(f"no GPU benchmark results ({type(e).__name__})")
    benchmarks = []
for b in benchmarks:
    name = b["name"]  # e.g. cuda_maml_sinusoid/first_order:0/threads:4/real_time
    if "first_order:1" in name or "real_time" not in b:
        continue
    threads = next((p.split(":")[1] for p in name.split("/") if p.startswith("threads:")), "?")
    if "conv4" in name:
        key = ("maml", "conv4-" + name.split("/")[1])
        threads = "1, " + ("gemm" if "engine:2" in name else "cudnn")
    else:
        key = ("maml", "small") if "maml" in name else ("platipus", "paper" if "paper" in name else "small")
    label = f"platipus::cuda graph{' gemm' if 'engine:2' in name else ''}" if "_graph" in name else f"platipus::cuda {threads} threads"
    rows.setdefault(key, {})[label] = b["real_time"] / (1e6 if b.get("time_unit") == "ns" else 1e3 if b.get("time_unit") == "us" else 1)
path = os.path.join(out, "peers.jsonl")
if os.path.exists(path):
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        rows.setdefault((r["algorithm"], r["network"]), {})[f"{r['framework']} {r['mode']}"] = r["ms_per_step"]
for (algorithm, network), times in sorted(rows.items()):
    print(f"{algorithm} {network}: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(times.items())))
# The profile: kernel time per kernel name over the profiled launches.
path = os.path.join(out, "profile.csv")
if os.path.exists(path):
    lines = [l for l in open(path) if l.startswith('"')]
    total, per_kernel = 0.0, collections.Counter()
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        value *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3}.get(
            r.get("Metric Unit"), 1)
        total += value
        per_kernel[r["Kernel Name"].split("(")[0][:60]] += value
    print(f"profile: {sum(1 for _ in csv.DictReader(lines))} kernel launches, {total:.1f} us of kernel time")
    for name, us in per_kernel.most_common(12):
        print(f"  {us:9.1f} us  {name}")
PY
say ""
say "done in $((SECONDS - START)) s"
