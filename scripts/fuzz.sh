#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz/, docs/FUZZING.md): built with clang in their own build directory.
#   scripts/fuzz.sh build                      configure + build every target
#   scripts/fuzz.sh smoke [SECONDS]            build, then run each target SECONDS (default 15) from its seed corpus;
#                                              fails on any crash, leak, sanitizer report or timeout (make test runs this)
#   scripts/fuzz.sh run TARGET [FLAGS...]      a long run of one target (e.g. -runs=1000000), its corpus growing in
#                                              <build>/corpus/TARGET; final statistics printed
# Environment: FUZZ_BUILD (default build-fuzz), JOBS (build parallelism, default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${FUZZ_BUILD:-build-fuzz}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
jobs=${JOBS:-$(nproc)}

have_libfuzzer() {
  command -v clang >/dev/null && command -v clang++ >/dev/null || return 1
  local probe
  probe=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' > "$probe/p.cc"
  clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cc" -o "$probe/p" >/dev/null 2>&1
  local rc=$?
  rm -rf "$probe"
  return $rc
}

build_targets() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  CC=clang CXX=clang++ cmake -S . -B "$build" -DSOARTUNE_FUZZ=ON -DSOARTUNE_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "${launcher[@]}" >/dev/null
  cmake --build "$build" -j "$jobs" --target fuzz_targets
}

targets() { for f in tests/fuzz/*_fuzz.cc; do basename "$f" _fuzz.cc; done; }

# Runs one target; its libFuzzer output goes to $log. Returns libFuzzer's exit status.
run_target() {
  local t=$1 log=$2; shift 2
  local corpus="$build/corpus/$t" artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  local dict=()
  [ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="$root/tests/fuzz/dict/$t.dict")
  # New inputs go to the first directory (the build's corpus); the checked-in seeds are only read.
  "$build/bin/${t}_fuzz" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 "${dict[@]}" \
    -artifact_prefix="$artifacts/" "$@" "$corpus" "$root/tests/fuzz/corpus/$t" >"$log" 2>&1
}

# One summary line from a run's log and its wall seconds: executions, time, exec/s, corpus size (inputs/bytes).
summary() {
  local log=$1 secs=$2
  local execs rate units
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  units=$(grep -a -o 'corp: [0-9]*/[0-9]*[a-zA-Z]*' "$log" | tail -1 | sed 's/corp: //')
  echo "executions ${execs:-?}, ${secs} s, ${rate:-?} exec/s, corpus ${units:-?}"
}

cmd=${1:-}
case "$cmd" in
  build)
    build_targets ;;
  smoke)
    secs=${2:-15}
    if ! have_libfuzzer; then
      echo "fuzz smoke: SKIPPED: clang++ with libFuzzer (-fsanitize=fuzzer) is not installed here (scripts/install-deps.sh installs clang and libclang-rt-dev)"
      exit 0
    fi
    echo "fuzz smoke: building the targets in $build"
    build_targets >/dev/null
    failed=0
    for t in $(targets); do
      log="$build/smoke-$t.log"
      start=$(date +%s)
      if run_target "$t" "$log" -max_total_time="$secs"; then
        echo "fuzz smoke: $t: ok: $(summary "$log" $(($(date +%s) - start)))"
      else
        echo "fuzz smoke: $t: FAILED (log: $log, input in $build/artifacts/$t/):"
        grep -E 'ERROR|SUMMARY|runtime error|fuzz invariant|Test unit written' "$log" | head -20
        failed=1
      fi
    done
    exit $failed ;;
  run)
    t=${2:?"usage: scripts/fuzz.sh run TARGET [libFuzzer flags]"}
    shift 2
    [ -x "$build/bin/${t}_fuzz" ] || build_targets
    log="$build/run-$t.log"
    status=0
    start=$(date +%s)
    run_target "$t" "$log" "$@" || status=$?
    echo "$t: $(summary "$log" $(($(date +%s) - start))), exit status $status (log: $log)"
    exit $status ;;
  *)
    sed -n '2,9p' "$0"
    exit 2 ;;
esac
