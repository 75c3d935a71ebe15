#!/usr/bin/env bash
# The soartune demo: starts soartuned on a temporary database and a free port, submits configs/jobs/demo.yaml
# (the trained demo model in configs/models/kjv-llama) with the soartune CLI, follows it live, prints the trials
# and the best config, checks that the best is not the reference config trial 0, writes the best config to
# ./demo-best.yaml (re-run it with: soartune-worker --trial demo-best.yaml), then stops the daemon (SIGTERM).
# The dashboard is on http://127.0.0.1:8700/ while it runs (a free port if 8700 is taken); --serve keeps the
# daemon and the dashboard up after the job until Ctrl-C.
# Usage: scripts/demo.sh [--serve] BUILD_DIR       Exit 0 only if every step worked.
set -euo pipefail

serve=0
if [[ "${1:-}" == "--serve" ]]; then serve=1; shift; fi
build="${1:-build}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$(cd "$build" 2>/dev/null && pwd)/bin"
for exe in soartuned soartune soartune-worker; do
  if [[ ! -x "$bin/$exe" ]]; then
    echo "demo: $bin/$exe is missing; build first (make build)" >&2
    exit 1
  fi
done

tmp="$(mktemp -d -t soartune-demo-XXXXXX)"
daemon_pid=""
cleanup() {
  local rc=$?
  if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && -f "$tmp/soartuned.log" ]]; then
    echo "demo: failed; the daemon's log ends with:" >&2
    tail -n 30 "$tmp/soartuned.log" >&2
  fi
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting soartuned (temporary database in $tmp)"
http_listen=127.0.0.1:8700
(exec 3<>/dev/tcp/127.0.0.1/8700) 2>/dev/null && http_listen=127.0.0.1:0   # 8700 taken: a free port
# In the repository, so the job's relative paths (the shipped model and its accuracy set) resolve there.
(cd "$repo" && exec "$bin/soartuned" --config "$repo/configs/daemon.yaml" --port 0 --port-file "$tmp/port" \
  --http-listen "$http_listen" --http-port-file "$tmp/http_port" \
  --database "$tmp/demo.db" --work-dir "$tmp/work" --worker "$bin/soartune-worker" \
  --log-level warn 2> "$tmp/soartuned.log") &
daemon_pid=$!
for _ in $(seq 1 300); do
  [[ -s "$tmp/port" ]] && break
  kill -0 "$daemon_pid" 2>/dev/null || { echo "demo: soartuned exited at start" >&2; exit 1; }
  sleep 0.1
done
[[ -s "$tmp/port" ]] || { echo "demo: soartuned did not start listening" >&2; exit 1; }
export SOARTUNE_ADDR="127.0.0.1:$(cat "$tmp/port")"
echo "   listening on $SOARTUNE_ADDR"
for _ in $(seq 1 50); do [[ -s "$tmp/http_port" ]] && break; sleep 0.1; done
[[ -s "$tmp/http_port" ]] || { echo "demo: the dashboard did not start listening" >&2; exit 1; }
echo "   dashboard: http://127.0.0.1:$(cat "$tmp/http_port")/"

cli() { "$bin/soartune" "$@"; }

echo "== submitting configs/jobs/demo.yaml"
job="$(cd "$repo" && cli submit configs/jobs/demo.yaml)"
echo "   job $job"

echo "== progress"
cli watch "$job"

echo "== trials"
cli trials "$job" --sort score --desc --limit 0

echo "== best config"
cli best "$job"
best="$(cli best "$job" --json)"
if [[ "$(jq -r '.is_reference' <<<"$best")" != false ]]; then
  echo "demo: the best config is the reference config (trial $(jq -r '.number' <<<"$best")): the search found" \
       "nothing better than where it started" >&2
  exit 1
fi
reference="$(cli trials "$job" --json --limit 0 | jq -c '[.trials[] | select(.is_reference)][0]')"
echo "   the best is trial $(jq -r '.number' <<<"$best"), not the reference: score $(jq -r '.score' <<<"$best" | cut -c1-6)" \
     "against the reference's $(jq -r '.score' <<<"$reference" | cut -c1-6), relative accuracy" \
     "$(jq -r '.relative_accuracy' <<<"$best" | cut -c1-6)%"

out="$PWD/demo-best.yaml"
cli export "$job" -o "$out"
echo "== the best launch config is in $out (re-run: $bin/soartune-worker --trial $out)"

if [[ $serve -eq 1 ]]; then
  echo "== the dashboard stays on http://127.0.0.1:$(cat "$tmp/http_port")/ until Ctrl-C"
  wait "$daemon_pid" || true
fi

echo "== stopping soartuned"
kill -TERM "$daemon_pid"
rc=0
wait "$daemon_pid" || rc=$?
daemon_pid=""
if [[ $rc -ne 0 ]]; then
  echo "demo: soartuned exited with $rc on SIGTERM" >&2
  exit 1
fi
echo "== done"
