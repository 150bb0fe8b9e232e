#!/usr/bin/env bash
# make test's two suites on one machine: the e2e suite first, the unit suite beside it once the e2e
# scenarios that keep every core busy (marked `cpu`: real vLLM) have ended. The rest of the e2e
# suite waits on the cluster's clock and leaves most of the CPU idle (about 80 % on 2 cores), so the
# unit suite runs then, at the lowest CPU priority (nice 19): an e2e process that wakes takes its
# core back at once. The unit suite's output goes to a log, printed whole when both have ended.
#
#   tools/test-side-by-side.sh "<e2e pytest command>" "<unit pytest command>"
#
# Exit status: 0 when both pass; else the e2e suite's status if it failed, else the unit suite's.
set -uo pipefail

read -r -a e2e_cmd <<< "$1"   # each a command line of words without quotes, as make passes it
read -r -a unit_cmd <<< "$2"
logs=.cluster/test-logs
mkdir -p "$logs"
cpu_done="$logs/e2e-cpu-done"
unit_log="$logs/unit.log"
rm -f "$cpu_done" "$unit_log"

unit_pid=""
e2e_pid=""
# shellcheck disable=SC2329  # called by the trap
stop() {  # Ctrl-C or a kill: stop both suites (their own teardown stops the clusters)
  for pid in $unit_pid $e2e_pid; do kill -INT -- "-$pid" 2>/dev/null || kill -INT "$pid" 2>/dev/null; done
  wait
  exit 130
}
trap stop INT TERM

started=$SECONDS
echo "test: e2e suite started; the unit suite starts beside it when its real-vLLM scenarios are done"
set -m  # each suite in a process group of its own, so that stop() reaches its workers
LLMSCALE_E2E_CPU_DONE="$cpu_done" "${e2e_cmd[@]}" &
e2e_pid=$!
while [ ! -e "$cpu_done" ] && kill -0 "$e2e_pid" 2>/dev/null; do sleep 2; done
echo "test: unit suite started beside the e2e suite after $((SECONDS - started)) s, at nice 19; log: $unit_log"
nice -n 19 "${unit_cmd[@]}" > "$unit_log" 2>&1 &
unit_pid=$!
set +m

wait "$e2e_pid"
e2e_rc=$?
echo "test: e2e suite ended (exit $e2e_rc) after $((SECONDS - started)) s"
wait "$unit_pid"
unit_rc=$?
echo "test: unit suite ended (exit $unit_rc) after $((SECONDS - started)) s; its output:"
cat "$unit_log"
if [ "$e2e_rc" -ne 0 ]; then exit "$e2e_rc"; fi
exit "$unit_rc"
