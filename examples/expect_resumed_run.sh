#!/usr/bin/env bash
# expect_resumed_run.sh SIGNAL DIR COMMAND...: runs COMMAND --out DIR/whole
# through; runs it again into DIR/stopped, sends SIGNAL (KILL, TERM or INT)
# at a random moment after its first checkpoint, and runs it once more with
# --resume. Fails unless the resumed run ends as the whole one did: the same
# results.json (but for run ids, paths and times), the same metrics rows (but for
# seconds), each once, and the same tensors in the checkpoint, to the byte.
set -euo pipefail
signal=$1 dir=$2
shift 2
rm -rf "$dir"
mkdir -p "$dir"
"$@" --out "$dir/whole" >"$dir/whole.log" 2>&1 || { cat "$dir/whole.log"; exit 1; }

"$@" --out "$dir/stopped" >"$dir/stopped.log" 2>&1 &
pid=$!
until [ -f "$dir/stopped/checkpoint.safetensors" ]; do
  kill -0 "$pid" 2>/dev/null || { echo "the run ended before its first checkpoint"; exit 1; }
  sleep 0.02
done
sleep "$((RANDOM % 2)).$((RANDOM % 10))"
kill "-$signal" "$pid"
status=0
wait "$pid" || status=$?
cat "$dir/stopped.log"
[ "$status" -ne 0 ] || { echo "the run ended before SIG$signal came; give it more steps"; exit 1; }
if [ "$signal" != KILL ]; then
  grep -q "stopped by SIG$signal" "$dir/stopped.log" || { echo "no stop message"; exit 1; }
fi
echo "stopped by SIG$signal: exit status $status"

"$@" --out "$dir/stopped" --resume >"$dir/resumed.log" 2>&1 || { cat "$dir/resumed.log"; exit 1; }
grep "resuming" "$dir/resumed.log"

same() {  # same WHAT FILTER FILE: FILTER's view of DIR/whole/FILE and DIR/stopped/FILE
  if ! diff <($2 "$dir/whole/$3") <($2 "$dir/stopped/$3") >"$dir/$3.diff"; then
    echo "$1 differ:"
    head -20 "$dir/$3.diff"
    exit 1
  fi
}
results() { grep -v -e '"run_id"' -e '"file"' -e '"meta_step_ms"' -e '"seconds"' "$1"; }
rows() { sed -E 's/"seconds":[^,}]*//' "$1"; }
tensors() {  # the data after the safetensors header (8 bytes of length, then the header)
  local header
  header=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  tail -c +"$((header + 9))" "$1" | od -An -v -t x1
}
same "results" results results.json
same "metrics rows" rows train.jsonl
same "checkpoint tensors" tensors checkpoint.safetensors
echo "resumed run = whole run: results.json, $(wc -l <"$dir/whole/train.jsonl") metrics rows, checkpoint tensors"
