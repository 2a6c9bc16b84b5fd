# Shell functions for the scripts that time platipus beside its peers in
# alternating rounds (mlp_comparison.sh, python_overhead.sh): sourced, with
# BENCH, TORCH_PYTHON and JAX_PYTHON set (a Python may be empty: that peer
# is skipped). Each function but summarize prints one measurement as a JSON
# line of peers/meta_step.py's kind.
peer=benchmarks/peers/meta_step.py
lines=$(mktemp)  # the JSON lines of every round, for summarize
trap 'rm -f "$lines"' EXIT

# platipus_benchmark NAME ALGORITHM NETWORK SIDE: the Google Benchmark NAME
# of $BENCH, as the side SIDE (with its peak memory where it reports one).
platipus_benchmark() {
  "$BENCH" --benchmark_filter="^$1(/real_time)?\$" --benchmark_min_time=2 --benchmark_format=json \
    2>/dev/null | python3 -c "import json, sys; b = json.load(sys.stdin)['benchmarks'][0]; print(json.dumps(
        {'framework': '$4', 'algorithm': '$2', 'network': '$3', 'ms_per_step': round(b['real_time'], 3),
         'peak_resident_mb': round(b['peak_resident_MB']) if 'peak_resident_MB' in b else None}))"
}

# peer_torch MODE ALGORITHM NETWORK: the PyTorch per-task loop or vmap.
peer_torch() {
  [ -n "$TORCH_PYTHON" ] || return 0
  "$TORCH_PYTHON" "$peer" --framework torch --mode "$1" --algorithm "$2" --network "$3" \
    --threads "$(nproc)" --warmup 1 --repeats 5 2>/dev/null | tail -1
}

# peer_jax ALGORITHM NETWORK: JAX, jit + vmap.
peer_jax() {
  [ -n "$JAX_PYTHON" ] || return 0
  "$JAX_PYTHON" "$peer" --framework jax --algorithm "$1" --network "$2" --warmup 2 \
    --repeats 20 2>/dev/null | tail -1
}

# summarize LINES REFERENCE: per workload, each side's median over the rounds
# (ms per step), its largest peak resident memory where it reports one, and
# its time over the REFERENCE side's.
summarize() {
  python3 - "$1" "$2" <<'SUMMARY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
for workload in dict.fromkeys((r["algorithm"], r["network"]) for r in rows):
    sides = {}
    for r in rows:
        if (r["algorithm"], r["network"]) == workload:
            side = r["framework"] + (" " + r["mode"] if r["framework"] == "torch" else "")
            sides.setdefault(side, []).append(r)
    reference = statistics.median(r["ms_per_step"] for r in sides[sys.argv[2]])
    print(f"{workload[0]} {workload[1]}:")
    for side, runs in sides.items():
        times = [r["ms_per_step"] for r in runs]
        median = statistics.median(times)
        peaks = [r["peak_resident_mb"] for r in runs if r.get("peak_resident_mb") is not None]
        memory = f"{max(peaks):6d} MB" if peaks else "     - MB"
        print(f"  {side:<22} {median:9.3f} ms {memory}  ({median / reference:.3f} x {sys.argv[2]};"
              f" rounds {times})")
SUMMARY
}
