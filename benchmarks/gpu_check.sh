#!/usr/bin/env bash
# The CUDA backend's checks on a GPU machine, in one run of a few minutes:
# tool versions, a Release build with CUDA (or programs built elsewhere by
# benchmarks/gpu_prebuild.sh), then in this order
#   * at once, as none of them is timed: the CUDA tests, the kernel tests
#     under compute-sanitizer memcheck, distributed parity under
#     `mpirun -np 2` on one GPU (the MPI staging path), the examples on the
#     GPU and on the CPU, and the Python package's tests (with its CUDA
#     learners, where gpu_prebuild.sh built it: PREBUILT/python);
#   * alone on the machine: the GPU benchmark (each case in a process of its
#     own, so that its device memory is its own), the PyTorch / JAX peers on
#     the same workloads, and a kernel profile of a replayed MAML step and a
#     conv4 step.
# Run from the repository root with OUT set to an output folder:
#
#   OUT=/tmp/gpu-check benchmarks/gpu_check.sh
#   OUT=/tmp/gpu-check PREBUILT=.device/gpu-check benchmarks/gpu_check.sh
#
# Writes $OUT/summary.txt, results.json (everything measured, one object)
# and check.log (every step's output), and beside them tests.log,
# benchmark.json, peers.jsonl, examples.tar.gz (every example's output
# folder) and profiles.tar.gz (ncu's CSV per profile). Every step has a time
# limit inside an overall deadline (DEADLINE seconds, default 450), so the
# script ends in time even when a step hangs; a failed step is reported and
# the next one still runs where it can. CHECKS picks steps (default "tests
# sanitizer mpi examples python benchmark peers profile"), PEER_WORKLOADS the
# peers' algorithm:network pairs (default every sinusoid and conv4
# workload), BENCHMARK_FILTER the GPU benchmarks (a --benchmark_filter
# regex, default all), SANITIZER_TESTS the tests memcheck runs (a Catch2
# test spec), PROFILE_FILTERS the benchmarks ncu profiles (one profile each)
# and PROFILE_LAUNCHES the kernels it profiles in each.
set -uo pipefail

: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BUILD=${BUILD:-build/gpu-check}
PREBUILT=${PREBUILT:-}
JOBS=${JOBS:-$(nproc)}
ARCH=${CUDA_ARCH:-90} # H100 and H200
DEADLINE=${DEADLINE:-450}
PYTHON=${PYTHON:-python3}
BENCHMARK_FILTER=${BENCHMARK_FILTER:-.}
PROFILE_FILTERS=${PROFILE_FILTERS:-cuda_maml_sinusoid_graph/first_order:0 cuda_maml_conv4_graph/miniimagenet/engine:1/batch_norm:1}
PROFILE_LAUNCHES=${PROFILE_LAUNCHES:-1500}
SANITIZER_TESTS=${SANITIZER_TESTS:-[backend],[ops]}
CHECKS=${CHECKS:-tests sanitizer mpi examples python benchmark peers profile}
PEER_WORKLOADS=${PEER_WORKLOADS:-maml:small platipus:small platipus:paper maml:conv4-miniimagenet maml:conv4-omniglot}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
NCU=${NCU:-$(command -v ncu || true)}
SANITIZER=${SANITIZER:-$(command -v compute-sanitizer || true)}
SUMMARY=$OUT/summary.txt
DETAILS=$OUT/check.log
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
  if ! BUILD=$BUILD CUDA_ARCH=$ARCH JOBS=$JOBS run 420 "$DETAILS" benchmarks/gpu_prebuild.sh "$PREBUILT"; then
    built=no
    say "  build failed; the end of check.log:"
    tail -25 "$DETAILS" | sed 's/^/    /' | tee -a "$SUMMARY" >/dev/null
  fi
fi
if [[ $built == yes ]]; then
  BIN=$(cd "$PREBUILT/bin" && pwd)
  nvidia=/opt/torch/.venv/lib/python3.12/site-packages/nvidia
  export LD_LIBRARY_PATH=$(cd "$PREBUILT/lib" && pwd):/usr/local/cuda/lib64:/usr/local/cuda/lib:$nvidia/cublas/lib:$nvidia/cudnn/lib:$nvidia/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  say ""
  say "== programs in $PREBUILT: $(cat "$PREBUILT/built-from.txt" 2>/dev/null)"
  ldd "$BIN"/* | grep 'not found' | sort -u | sed 's/^/  missing: /' | tee -a "$SUMMARY"
fi

# Open MPI: the machine's, or the one gpu_prebuild.sh carried (relocated
# with OPAL_PREFIX; its own libraries in openmpi/lib).
MPIRUN=$(command -v mpirun || true)
if [[ -z $MPIRUN && $built == yes && -x $PREBUILT/openmpi/usr/bin/mpirun ]]; then
  ompi=$(cd "$PREBUILT/openmpi" && pwd)
  export OPAL_PREFIX=$ompi/usr PMIX_INSTALL_PREFIX=$ompi/usr
  export LD_LIBRARY_PATH=$ompi/lib:$ompi/usr/lib/x86_64-linux-gnu/openmpi/lib:$LD_LIBRARY_PATH
  MPIRUN=$ompi/usr/bin/mpirun
fi

# The checks that time nothing run side by side, each with its own log,
# appended to check.log when all have ended.
pending=()
if [[ $built == yes ]] && checking tests; then
  say ""
  say "== the CUDA tests (each test case's time in tests.log)"
  run 150 "$OUT/tests.log" "$BIN/platipus_cuda_tests" --durations yes &
  pending+=(tests)
fi
if [[ $built == yes && -n $SANITIZER ]] && checking sanitizer; then
  say "== the kernel tests ($SANITIZER_TESTS) under compute-sanitizer memcheck"
  run 150 "$OUT/sanitizer.log" "$SANITIZER" --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$BIN/platipus_cuda_tests" "$SANITIZER_TESTS" &
  pending+=(sanitizer)
fi
if [[ $built == yes && -n $MPIRUN ]] && checking mpi; then
  say "== distributed parity, mpirun -np 2 on one GPU (MPI through host memory): $MPIRUN"
  mkdir -p "$OUT/mpi"
  run 120 "$OUT/mpi.log" "$MPIRUN" --allow-run-as-root --oversubscribe -np 2 \
    "$BIN/distributed_cuda_test" parity "$OUT/mpi" &
  pending+=(mpi)
fi
if [[ $built == yes ]] && checking examples; then
  say "== the examples: sine_line on the GPU (replayed and eager steps) and on the CPU, 1000 steps each; circles and active learning on the GPU"
  ex=$OUT/examples
  mkdir -p "$ex"
  (
    for program in sine_line_cuda sine_line; do
      run 90 "$ex/examples.log" "$BIN/$program" --quick --steps 1000 --eval-tasks 200 --no-plot --out "$ex/$program"
    done
    run 90 "$ex/examples.log" "$BIN/sine_line_cuda" --no-cuda-graph --quick --steps 1000 --eval-tasks 200 \
      --no-plot --out "$ex/sine_line_cuda_eager"
    run 30 "$ex/examples.log" "$BIN/circles_cuda" --quick --no-plot --out "$ex/circles_cuda"
    run 30 "$ex/examples.log" "$BIN/active_learning_cuda" --eval-only \
      --checkpoint "$ex/sine_line_cuda/checkpoint.safetensors" --eval-tasks 20 --no-plot --out "$ex/active_learning_cuda"
  ) &
  pending+=(examples)
fi
if [[ $built == yes && -d $PREBUILT/python/platipus ]] && checking python; then
  say "== the Python package's tests, its CUDA learners included (PYTHONPATH=$PREBUILT/python)"
  PYTHONPATH=$(cd "$PREBUILT/python" && pwd) run 150 "$OUT/python.log" "$PYTHON" -m pytest -q -p no:cacheprovider \
    tests/python/test_cuda.py tests/python/test_learners.py &
  pending+=(python)
fi
wait
for log in sanitizer mpi examples/examples python; do
  [[ -f $OUT/$log.log ]] && cat "$OUT/$log.log" >>"$DETAILS" && rm "$OUT/$log.log"
done
if [[ " ${pending[*]} " == *" tests "* ]]; then
  say "  tests:"
  grep -E 'test cases|assertions|FAILED|No tests ran' "$OUT/tests.log" | sort | uniq -c | sed 's/^/    /' |
    tee -a "$SUMMARY" >/dev/null
fi
if [[ " ${pending[*]} " == *" sanitizer "* ]]; then
  say "  memcheck: $(grep -E 'ERROR SUMMARY' "$DETAILS" | tail -1)"
fi
if [[ " ${pending[*]} " == *" python "* ]]; then
  say "  python: $(grep -E '[0-9]+ (passed|failed|errors?)' "$DETAILS" | tail -1)"
fi
if [[ " ${pending[*]} " == *" examples "* ]]; then
  "$PYTHON" - "$OUT/examples" <<'PY' 2>&1 | tee -a "$SUMMARY"
import csv, json, os, sys
for program in ("sine_line_cuda", "sine_line_cuda_eager", "sine_line"):
    try:
        results = json.load(open(os.path.join(sys.argv[1], program, "results.json")))["results"]
        rows = list(csv.DictReader(open(os.path.join(sys.argv[1], program, "train.csv"))))
    except (OSError, ValueError, KeyError) as e:
        print(f"  {program}: no results ({type(e).__name__})")
        continue
    last = {row["learner"]: row for row in rows}  # each learner's last record
    cells = []
    for learner in ("maml", "maml_noise", "platipus"):
        r = results.get(learner, {})
        ms = (f" {1000 * float(last[learner]['seconds']) / int(last[learner]['step']):.2f} ms/step"
              if learner in last else "")
        cells.append(f"{learner}{ms} " + " ".join(
            f"{k} {r[k]['mean']:.3f}+-{r[k]['ci95']:.3f}" for k in ("mse", "nll") if k in r))
    print(f"  {program}: " + "; ".join(cells))
PY
  tar -czf "$OUT/examples.tar.gz" -C "$OUT" examples && rm -rf "$OUT/examples"
fi
rm -rf "$OUT/mpi"

if [[ $built == yes ]] && checking benchmark; then
  say ""
  say "== GPU benchmark (platipus::cuda, float; each case in its own process)"
  bench=$OUT/benchmark-cases
  mkdir -p "$bench"
  k=0
  while read -r name; do
    k=$((k + 1))
    run 60 "$DETAILS" "$BIN/platipus_cuda_benchmarks" --benchmark_min_time=0.3 --benchmark_filter="^$name\$" \
      --benchmark_out="$bench/$k.json" --benchmark_out_format=json </dev/null
  done < <("$BIN/platipus_cuda_benchmarks" --benchmark_list_tests --benchmark_filter="$BENCHMARK_FILTER")
  "$PYTHON" - "$bench" "$OUT/benchmark.json" <<'PY'
import glob, json, sys
merged = None
for path in sorted(glob.glob(sys.argv[1] + "/*.json"), key=lambda p: int(p.split("/")[-1][:-5])):
    try:
        part = json.load(open(path))
    except ValueError:
        continue
    if merged is None:
        merged = part
    else:
        merged["benchmarks"] += part["benchmarks"]
json.dump(merged or {"benchmarks": []}, open(sys.argv[2], "w"), indent=1)
PY
  rm -rf "$bench"
fi

if checking peers; then
  say ""
  say "== peers on the GPU (benchmarks/peers/meta_step.py --device cuda, a process per workload): $PEER_WORKLOADS"
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  : >"$OUT/peers.jsonl"
  for workload in $PEER_WORKLOADS; do
    run 90 "$DETAILS" "$PYTHON" - "$OUT/peers.jsonl" "$workload" <<'PY'
import json, sys, traceback
sys.path.insert(0, "benchmarks/peers")
import meta_step
algorithm, network = sys.argv[2].split(":")
conv = "conv" in network
# conv4's per-task loop is the slowest and least telling: vmap is torch's best.
modes = (("torch", "vmap"), ("jax", "jit")) if conv else (("torch", "loop"), ("torch", "vmap"), ("jax", "jit"))
with open(sys.argv[1], "a") as out:
    for framework, mode in modes:
        repeats = {"loop": 5, "vmap": 10, "jit": 20 if conv else 50}[mode]
        argv = ["--framework", framework, "--mode", mode, "--algorithm", algorithm, "--network", network,
                "--device", "cuda", "--warmup", "3", "--repeats", str(repeats)]
        try:
            line = json.dumps(meta_step.measure(meta_step.parser().parse_args(argv)))
        except Exception:
            traceback.print_exc()
            continue
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()
PY
  done
fi

if [[ $built == yes && -n $NCU ]] && checking profile; then
  say ""
  profiles=$OUT/profiles
  mkdir -p "$profiles"
  for filter in $PROFILE_FILTERS; do
    say "== kernel profile of $filter (ncu, the first $PROFILE_LAUNCHES kernels)"
    run 75 "$DETAILS" "$NCU" --csv --clock-control none --metrics gpu__time_duration.sum \
      --launch-count "$PROFILE_LAUNCHES" --log-file "$profiles/${filter//[^A-Za-z0-9_.-]/_}.csv" \
      "$BIN/platipus_cuda_benchmarks" --benchmark_filter="$filter" --benchmark_min_time=0.01
  done
fi

say ""
say "== meta-step times, ms (median for peers; mean for platipus, per thread count and replayed as a CUDA graph)"
"$PYTHON" - "$OUT" <<'PY' 2>&1 | tee -a "$SUMMARY"
import collections, csv, glob, json, os, re, sys
out = sys.argv[1]
results = {"benchmarks": [], "peers": [], "profiles": {}}
try:
    benchmarks = json.load(open(os.path.join(out, "benchmark.json"))).get("benchmarks", [])
except (OSError, ValueError) as e:
    print(f"no GPU benchmark results ({type(e).__name__})")
    benchmarks = []
ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
for b in benchmarks:
    results["benchmarks"].append({k: b[k] for k in ("name", "real_time", "time_unit", "iterations", "label",
                                                   "graph_nodes", "kernels_per_step", "device_MB") if k in b})
    print(f"  {b['name']}: {b['real_time'] * ms.get(b.get('time_unit'), 1):.3f} ms"
          + (f", {int(b['kernels_per_step'])} kernels" if "kernels_per_step" in b else "")
          + (f", {b['device_MB']:.0f} MB" if "device_MB" in b else ""))
path = os.path.join(out, "peers.jsonl")
if os.path.exists(path):
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        results["peers"].append(r)
        print(f"  {r['framework']} {r['mode']} {r['algorithm']} {r['network']}: {r['ms_per_step']:.3f} ms"
              + (f", {r['peak_device_mb']:.0f} MB" if r.get("peak_device_mb") is not None else ""))
# The profiles: kernel time per kernel name, and by kind of kernel.
kinds = [("gemm", r"gemm|gemv|sm90_|cutlass|xmma|cublas"), ("convolution (cuDNN)", r"conv|cudnn|wgrad|dgrad|fprop"),
         ("elementwise", r"binary|unary|axpy|fill|select|arange|adam"), ("copy", r"copy|strided|im2col|col2im|transpose"),
         ("reduction", r"reduce|sum|softmax|batch_norm")]
for path in sorted(glob.glob(os.path.join(out, "profiles", "*.csv"))):
    lines = [l for l in open(path) if l.startswith('"')]
    total, launches, per_kernel, per_kind = 0.0, 0, collections.Counter(), collections.Counter()
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(r["Metric Value"].replace(",", ""))
        value *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1, "us": 1, "msecond": 1e3, "ms": 1e3}.get(
            r.get("Metric Unit"), 1)
        name = r["Kernel Name"].split("(")[0][:80]
        total += value
        launches += 1
        per_kernel[name] += value
        per_kind[next((k for k, pattern in kinds if re.search(pattern, name, re.I)), "other")] += value
    profile = os.path.basename(path)[:-4]
    results["profiles"][profile] = {"launches": launches, "kernel_us": round(total, 1),
                                   "top": [[n, round(us, 1)] for n, us in per_kernel.most_common(10)],
                                   "kinds": {k: round(us, 1) for k, us in per_kind.most_common()}}
    print(f"profile {profile}: {launches} kernel launches, {total:.1f} us of kernel time")
    for name, us in per_kind.most_common():
        print(f"  {100 * us / max(total, 1e-9):5.1f}%  {name}")
    for name, us in per_kernel.most_common(5):
        print(f"  {us:9.1f} us  {name}")
summary = open(os.path.join(out, "summary.txt")).read()
results["summary"] = summary
json.dump(results, open(os.path.join(out, "results.json"), "w"), indent=1)
PY
if [[ -d $OUT/profiles ]]; then tar -czf "$OUT/profiles.tar.gz" -C "$OUT" profiles && rm -rf "$OUT/profiles"; fi
say ""
say "done in $((SECONDS - START)) s"
