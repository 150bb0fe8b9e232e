#!/usr/bin/env bash
# shellcheck disable=SC2329  # stop() and what it calls run from the traps
# make test's two suites on one machine: the e2e suite first, the unit suite beside it once the e2e
# scenarios that keep every core busy (marked `cpu`: real vLLM) have ended. The rest of the e2e
# suite waits on the cluster's clock and leaves most of the CPU idle (about 80 % on 2 cores), so the
# unit suite runs then, at nice 19: below the e2e suite's own processes; the cluster's components run
# in sessions of their own, which a kernel with autogroup scheduling serves evenly with this one.
# The unit tests that assert on latencies a client measures with the wall clock (marked `timing`)
# are left out of that run: they start once the e2e suite has ended (its cluster is down), at the
# script's own niceness (0 under make), beside the unit suite's tail (nice 19 in the same session:
# it yields to them). Beside the e2e suite they failed CI and fresh-clone runs, a different one
# each time, on a late read or write.
# The unit runs' output goes to logs, printed whole when all have ended.
#
#   tools/test-side-by-side.sh "<e2e pytest command>" "<unit pytest command>" "<timing pytest command>"
#
# Each command is split on blanks (make's command lines have no quoted words). Exit status: 0 when
# all pass; else the e2e suite's status if it failed, else the unit suite's, else the timing
# tests'; 128 + n on signal n (Ctrl-C: every suite gets SIGINT and tears its clusters down; TERM
# after a minute, then KILL).
set -uo pipefail

read -r -a e2e_cmd <<< "$1"
read -r -a unit_cmd <<< "$2"
read -r -a timing_cmd <<< "$3"
logs="$PWD/.cluster/test-logs"
mkdir -p "$logs"
cpu_done="$logs/e2e-cpu-done"
unit_log="$logs/unit.log"
timing_log="$logs/timing.log"
rm -f "$cpu_done" "$unit_log" "$timing_log"

unit_pid=""
e2e_pid=""
timing_pid=""

groups_alive() {
  local pid
  for pid in $unit_pid $e2e_pid $timing_pid; do kill -0 -- "-$pid" 2>/dev/null && return 0; done
  return 1
}

stop() {
  local code=$1 pid _
  trap '' INT TERM
  for pid in $unit_pid $e2e_pid $timing_pid; do kill -INT -- "-$pid" 2>/dev/null; done
  for _ in $(seq 120); do groups_alive || break; sleep 0.5; done
  for pid in $unit_pid $e2e_pid $timing_pid; do kill -TERM -- "-$pid" 2>/dev/null; done
  for _ in $(seq 10); do groups_alive || break; sleep 0.5; done
  for pid in $unit_pid $e2e_pid $timing_pid; do kill -KILL -- "-$pid" 2>/dev/null; done
  echo "test: stopped (signal $((code - 128)))" >&2
  exit "$code"
}
trap 'stop 130' INT
trap 'stop 143' TERM

started=$SECONDS
echo "test: e2e suite started; the unit suite starts beside it when its real-vLLM scenarios are done"
# Job control only while starting a suite: each gets a process group of its own, which stop()
# signals whole, and keeps Ctrl-C's SIGINT going to this script (a foreground job would take it).
set -m
LLMSCALE_E2E_CPU_DONE="$cpu_done" "${e2e_cmd[@]}" < /dev/null &
e2e_pid=$!
set +m
# `sleep & wait`: a trapped signal ends the wait builtin at once (a foreground sleep would run out
# first). A shell started with SIGINT ignored (in the background of a non-interactive shell) cannot
# trap it: Ctrl-C cannot reach such a run anyway, and stop() still ends both suites on TERM.
while [ ! -e "$cpu_done" ] && kill -0 "$e2e_pid" 2>/dev/null; do sleep 2 & wait $!; done
echo "test: unit suite started beside the e2e suite after $((SECONDS - started)) s, at nice 19; log: $unit_log"
set -m
nice -n 19 "${unit_cmd[@]}" < /dev/null > "$unit_log" 2>&1 &
unit_pid=$!
set +m

wait "$e2e_pid"
e2e_rc=$?
echo "test: e2e suite ended (exit $e2e_rc) after $((SECONDS - started)) s; the timing tests start; log: $timing_log"
set -m
"${timing_cmd[@]}" < /dev/null > "$timing_log" 2>&1 &
timing_pid=$!
set +m
wait "$unit_pid"
unit_rc=$?
echo "test: unit suite ended (exit $unit_rc) after $((SECONDS - started)) s"
wait "$timing_pid"
timing_rc=$?
echo "test: timing tests ended (exit $timing_rc) after $((SECONDS - started)) s"
echo "test: the unit suite's output:"
cat "$unit_log"
echo "test: the timing tests' output:"
cat "$timing_log"
if [ "$e2e_rc" -ne 0 ]; then exit "$e2e_rc"; fi
if [ "$unit_rc" -ne 0 ]; then exit "$unit_rc"; fi
exit "$timing_rc"
