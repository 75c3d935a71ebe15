#!/usr/bin/env bash
# Everything the CUDA area checks and measures on a lent GPU, in one call.
#
#   scripts/device-run.sh bundle [BUILD_DIR] [--with-model | --with-model-gz | --with-model-xz] [--xz] [--with-sala-gz] [--baseline=DIR]
#       (on the build machine) copies the executables of BUILD_DIR (default build-cuda) and their non-system
#       shared libraries into .device/ (ignored by git), stripped; --with-model also copies the shared tiny
#       model there for the whole-model test (--with-model-gz as a gzip tarball, 37 instead of 46 MB,
#       --with-model-xz as an xz one, 33 MB; unpacked by `run`: the device call carries 64 MiB in all). --xz packs
#       the executables and libraries into one xz tarball too (the daemon's, the worker's and the kernels'
#       libraries: about 48 MB as files, 20 MB packed), for calls that need the daemon and the model together.
#       --with-sala-gz adds the shared tiny-sala model (MiniCPM-SALA, 19 MB as a gzip tarball) for the `sala` step.
#   scripts/device-run.sh run [STEPS...]
#       (on the GPU machine, from the repository root) runs STEPS (default: all of
#       tests sanitizer model bench peer e2e; also: sala, sala_bench, sala_sparse, timing, lightning,
#       lightning_sanitizer, sparse, sparse_sanitizer, baseline, host_weights, decode, linear,
#       ncu_decode, ncu_gemv, sass, tables, tables8b, job8b, sala_job, gptq) and writes
#       logs under $OUT; prints a summary table last. APPEND_SUMMARY=1 appends to $OUT/summary.txt instead of
#       starting it anew (several runs into one summary, e.g. with different DECODE_ARGS). Steps run in the order
#       they stand in this file, whatever the order of STEPS; DEADLINE=SECONDS bounds the whole run (below).
set -uo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
bundle="$here/.device"
mode="${1:-run}"
shift || true

if [[ "$mode" == "bundle" ]]; then
  build="$here/build-cuda"
  with_model=0
  pack=0
  with_sala=0
  baseline_dir=""
  for a in "$@"; do
    case "$a" in
      --with-model) with_model=1 ;;
      --with-model-gz) with_model=2 ;;
      --with-model-xz) with_model=3 ;;
      --xz) pack=1 ;;
      --with-sala-gz) with_sala=1 ;;
      --baseline=*) baseline_dir="${a#--baseline=}" ;;
      *) build="$a" ;;
    esac
  done
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  # (A worktree's .git is a file: ask git where the exclude file is.)
  exclude="$(git -C "$here" rev-parse --path-format=absolute --git-path info/exclude 2>/dev/null || echo "$here/.git/info/exclude")"
  grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >>"$exclude"
  # BUNDLE_EXES narrows the set (the tree plus carried files must stay under the device's 64 MiB).
  exes="${BUNDLE_EXES:-soartune_kernel_gpu_tests soartune_kernel_unit_tests soartune_cuda_model_tests soartune-bench soartune-worker soartuned soartune}"
  for exe in $exes; do
    src="$build/bin/$exe"
    # The daemon, the CLI and bo_bench never touch CUDA: any build of them will do (the newest).
    [[ -x "$src" || "$exe" == soartune-worker ]] || src="$(ls -t "$here"/build/bin/"$exe" "$here"/build-*/bin/"$exe" 2>/dev/null | head -1)"
    [[ -n "$src" && -x "$src" ]] || continue
    [[ "$exe" == soartune || "$exe" == soartuned || "$exe" == bo_bench || -x "$build/bin/$exe" ]] || continue
    echo "bundle: $exe from $src"
    cp "$src" "$bundle/bin/"
    strip "$bundle/bin/$exe" 2>/dev/null || true
    # Non-system libraries: everything but glibc, the C++ runtime, the driver, cuBLAS and cuSOLVER with what it
    # loads (cuSPARSE, nvJitLink): taken from the GPU machine's CUDA, which matches the driver there.
    ldd "$src" | awk '/=> \// {print $3}' | while read -r lib; do
      base="$(basename "$lib")"
      case "$base" in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*|libcublas*.so*|libcusolver*.so*|libcusparse*.so*|libnvJitLink*.so*) continue ;;
      esac
      [[ -e "$bundle/lib/$base" ]] || { cp -L "$lib" "$bundle/lib/"; strip --strip-unneeded "$bundle/lib/$base" 2>/dev/null || true; }
    done
  done
  if [[ $with_model -eq 1 ]]; then
    mkdir -p "$bundle/shared/models"
    cp -r "$here/../shared/models/tiny-llama-bpe4k" "$bundle/shared/models/"
  elif [[ $with_model -eq 2 ]]; then
    tar cf - -C "$here/../shared/models" tiny-llama-bpe4k | gzip -1 >"$bundle/tiny-llama-bpe4k.tgz"
  elif [[ $with_model -eq 3 ]]; then
    tar cf - -C "$here/../shared/models" tiny-llama-bpe4k | xz -T2 -6 >"$bundle/tiny-llama-bpe4k.txz"
  fi
  if [[ $with_sala -eq 1 ]]; then
    tar cf - -C "$here/../shared/models" tiny-sala | gzip -1 >"$bundle/tiny-sala.tgz"
  fi
  # --baseline=DIR: an earlier bundle, unpacked (DIR/bin, DIR/lib): its timing programs (soartune-bench,
  # lightning_timing, sparse_attention_timing) go to bin/baseline/ and its own kernel library (the programs load
  # the kernels from libsoartune_kernels_cuda.so, not from the executable) to bin/baseline/lib/, for steps
  # `baseline` and `host_weights`: the same timings of both builds side by side in one call.
  if [[ -n "$baseline_dir" ]]; then
    mkdir -p "$bundle/bin/baseline/lib"
    for exe in soartune-bench lightning_timing sparse_attention_timing soartune-host-weights-bench; do
      [[ -x "$baseline_dir/bin/$exe" ]] && cp "$baseline_dir/bin/$exe" "$bundle/bin/baseline/"
    done
    # (The kernel library sits in the build's kernels/ folder.)
    find "$baseline_dir" -name 'libsoartune_*.so*' -exec cp {} "$bundle/bin/baseline/lib/" \;
    echo "bundle: baseline $(ls "$bundle/bin/baseline" "$bundle/bin/baseline/lib" | tr '\n' ' ')from $baseline_dir"
  fi
  if [[ $pack -eq 1 ]]; then
    tar cf - -C "$bundle" bin lib | xz -T2 -6 >"$bundle/exes.txz" && rm -rf "$bundle/bin" "$bundle/lib"
  fi
  cp "$here/scripts/torch_peer.py" "$bundle/" 2>/dev/null || true
  du -sh "$bundle" "$bundle"/* | sed 's/^/bundle: /'
  exit 0
fi

# ---- run (on the GPU machine) ----
OUT="${OUT:-/tmp/soartune-device-out}"
mkdir -p "$OUT"
if [[ -f "$bundle/tiny-llama-bpe4k.tgz" && ! -d "$bundle/shared/models/tiny-llama-bpe4k" ]]; then
  mkdir -p "$bundle/shared/models" && tar xzf "$bundle/tiny-llama-bpe4k.tgz" -C "$bundle/shared/models"
fi
if [[ -f "$bundle/tiny-sala.tgz" && ! -d "$bundle/shared/models/tiny-sala" ]]; then
  mkdir -p "$bundle/shared/models" && tar xzf "$bundle/tiny-sala.tgz" -C "$bundle/shared/models"
fi
if [[ -f "$bundle/tiny-llama-bpe4k.txz" && ! -d "$bundle/shared/models/tiny-llama-bpe4k" ]]; then
  mkdir -p "$bundle/shared/models" && tar xJf "$bundle/tiny-llama-bpe4k.txz" -C "$bundle/shared/models"
fi
if [[ -f "$bundle/exes.txz" && ! -d "$bundle/bin" ]]; then
  tar xJf "$bundle/exes.txz" -C "$bundle"
fi
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests model bench peer sanitizer e2e)
want() { local s; for s in "${steps[@]}"; do [[ "$s" == "$1" ]] && return 0; done; return 1; }

cublas_dir="$(dirname "$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name 'libcublas.so.13*' 2>/dev/null | head -1)")"
# cuSOLVER (GPTQ on the GPU) and the libraries it loads: the toolkit's, else the ones PyTorch's wheels carry.
cuda_lib_dirs=""
for lib in libcusolver.so.12 libcusparse.so.12 libnvJitLink.so.13; do
  found="$(find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null) \
    -name "$lib*" 2>/dev/null | head -1)"
  [[ -n "$found" ]] && cuda_lib_dirs="${cuda_lib_dirs}:$(dirname "$found")"
done
export LD_LIBRARY_PATH="$bundle/lib:${cublas_dir}${cuda_lib_dirs}:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
bin="$bundle/bin"
summary="$OUT/summary.txt"
[[ -n "${APPEND_SUMMARY:-}" ]] || : >"$summary"
note() { echo "$*" | tee -a "$summary"; }

# DEADLINE (optional): seconds from this script's start by which every step must have ended. Each step's own
# time limit is cut to what is left (a step that would get under 5 s is skipped, rc 124), so the steps end by
# themselves. Use it instead of an outer `timeout`: that would kill this script but not the step's program
# (timeout runs it in a process group of its own), which would keep the GPU busy while later steps time.
t_start=$(date +%s)
step_timeout() {
  local limit="$1" left
  shift
  if [[ -n "${DEADLINE:-}" ]]; then
    left=$(( DEADLINE - ($(date +%s) - t_start) ))
    if (( left < 5 )); then
      echo "DEADLINE ${DEADLINE} s reached: $1 not run" >&2
      return 124
    fi
    (( left < limit )) && limit=$left
  fi
  timeout "$limit" "$@"
}

# The tests a gtest log says failed, as a gtest filter (A.B:C.D); a test that started and never finished (the
# program crashed or was killed in it) counts as failed. Empty: none.
failed_tests() {
  awk '/^\[ RUN      \] / {run = $4} /^\[       OK \] |^\[  SKIPPED \] / {run = ""}
       /^\[  FAILED  \] [A-Za-z0-9_\/]+\.[A-Za-z0-9_\/]+(,| |$)/ && !/listed below/ {t = $4; sub(/,$/, "", t); f[t] = 1; run = ""}
       END {if (run != "") f[run] = 1; for (t in f) out = out (out == "" ? "" : ":") t; print out}' "$1"
}

# After a GPU test program failed or crashed: its failing tests once more under compute-sanitizer memcheck, so
# that a call which finds a bug also brings back where memory went wrong (a further call costs a machine start).
# $1 names the log ($OUT/$1_memcheck.log), $2 the test program, $3 its gtest log. SANITIZE_ON_FAILURE_S bounds
# it (default 45 s; 0: off).
memcheck_failures() {
  local filter limit="${SANITIZE_ON_FAILURE_S:-45}"
  filter="$(failed_tests "$3")"
  [[ -n "$filter" && "$limit" != 0 ]] || return 0
  if ! command -v compute-sanitizer >/dev/null; then
    note "$1: failed $filter; compute-sanitizer not found"
    return 0
  fi
  SOARTUNE_SHARED_DIR="$bundle/shared" step_timeout "$limit" compute-sanitizer --tool memcheck --error-exitcode 9 \
    --print-limit 20 "$2" --gtest_color=no --gtest_filter="$filter" >"$OUT/$1_memcheck.log" 2>&1
  note "$1: memcheck of the failed tests ($filter): rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/$1_memcheck.log" | tail -1)"
  grep -E '^========= (Invalid|Out of|Program hit|Address|    at )' "$OUT/$1_memcheck.log" | head -12 | tee -a "$summary"
}

{
  date -u
  git -C "$here" rev-parse --short=12 HEAD 2>/dev/null || echo "commit unknown"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,clocks.max.sm,power.limit,temperature.gpu --format=csv
  echo "cublas from: $cublas_dir; cusolver and its libraries from: ${cuda_lib_dirs#:}"
  ldd "$bin/soartune-bench" 2>&1 | grep -E 'not found|cublas|cudart' || true
} >"$OUT/device.txt" 2>&1
note "device: $(sed -n 4p "$OUT/device.txt")"

if want tests; then
  step_timeout 150 "$bin/soartune_kernel_gpu_tests" --gtest_color=no >"$OUT/kernel_tests.log" 2>&1
  rc=$?
  note "kernel tests (gpu): rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) .*tests?[,.]' "$OUT/kernel_tests.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED|Failure|error' "$OUT/kernel_tests.log" | head -20 | tee -a "$summary"
  memcheck_failures kernel_tests "$bin/soartune_kernel_gpu_tests" "$OUT/kernel_tests.log"
fi

# One gtest filter of soartune_cuda_model_tests: $1 names its log ($OUT/$1.log) and summary line, $2 the model it
# needs under the bundle's shared/models ("" none; the bundle options --with-model* / --with-sala-gz add them), $3
# the filter, $4 its time limit, $5 what of the log goes into the summary; failed tests are then memchecked.
model_tests() {
  if [[ -n "$2" && ! -d "$bundle/shared/models/$2" ]]; then
    note "$1: skipped (the bundle holds no shared/models/$2)"
    return
  fi
  SOARTUNE_SHARED_DIR="$bundle/shared" step_timeout "$4" "$bin/soartune_cuda_model_tests" --gtest_color=no \
    --gtest_filter="$3" >"$OUT/$1.log" 2>&1
  note "$1 (gpu${2:+, $2}): rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) .*tests?[,.]' "$OUT/$1.log" | tr '\n' ' ')"
  grep -E "$5" "$OUT/$1.log" | head -40 | tee -a "$summary"
  memcheck_failures "$1" "$bin/soartune_cuda_model_tests" "$OUT/$1.log"
}

if want model; then
  model_tests model_tests tiny-llama-bpe4k '*' 240 'agreement|greedy|continuations|^\[  FAILED|Failure'
fi

# MiniCPM-SALA on the CUDA engine: the tiny-sala tests (tests/kernels/cuda_sala_gpu_test.cc) against the
# model's fp32 reference outputs.
if want sala; then
  # The RoPE + KV write kernel's NoPE form (the softmax layers') against its twin first.
  step_timeout 60 "$bin/soartune_kernel_gpu_tests" --gtest_color=no --gtest_filter='RopeKvWrite.*' >"$OUT/sala_rope.log" 2>&1
  note "rope/NoPE kernel test (gpu): rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) .*tests?[,.]' "$OUT/sala_rope.log" | tr '\n' ' ')"
  memcheck_failures sala_rope "$bin/soartune_kernel_gpu_tests" "$OUT/sala_rope.log"
  model_tests sala_tests tiny-sala 'CudaSala.*' 200 'tiny-sala|^\[  FAILED|Failure|Expected|Which is|diverges'
fi

# synthetic:minicpm-sala-9b beside synthetic:llama3-8b, one invocation (soartune-bench --only sala): decode
# batch 1 / 8 / 64 (bf16, int4 g128) and 4k / 60k prefill against the H200's datasheet rooflines.
if want sala_bench; then
  step_timeout 330 "$bin/soartune-bench" --only sala --reps "${SALA_REPS:-10}" ${SALA_ARGS:-} \
    --json "$OUT/sala_bench.jsonl" >"$OUT/sala_bench.txt" 2>&1
  rc=$?
  note "soartune-bench --only sala: rc=$rc"
  grep -E '^(sala|llama)_|^device|error|failed' "$OUT/sala_bench.txt" | tee -a "$summary"
  (( rc == 0 )) || tail -3 "$OUT/sala_bench.txt" | tee -a "$summary"   # the bench's own reason
fi

# InfLLM-v2 sparse attention in the CUDA engine (engine/cuda/sparse_layer.h): its tests on tiny-sala (dense_len
# lowered to 1024; against the CPU backend, all blocks kept against dense, knobs, memory; needs --with-sala-gz),
# then synthetic:minicpm-sala-9b at 60k tokens, dense vs sparse (soartune-bench --only sala_sparse).
# Bundle with BUNDLE_EXES="soartune_cuda_model_tests soartune-bench" and --with-sala-gz.
if want sala_sparse; then
  model_tests sala_sparse_tests tiny-sala 'CudaSalaSparse.*' 240 \
    '^(CUDA|CPU|all blocks|knobs|the selection)|^\[  FAILED|Failure|Expected|Which is|error'
  step_timeout 150 "$bin/soartune-bench" --only sala_sparse --reps "${SALA_REPS:-10}" >"$OUT/sala_sparse_bench.txt" 2>&1
  rc=$?
  note "soartune-bench --only sala_sparse: rc=$rc"
  grep -E '^(minicpm|step|prefill|decode|sparse attention)|error|failed' "$OUT/sala_sparse_bench.txt" | tee -a "$summary"
  (( rc == 0 )) || tail -3 "$OUT/sala_sparse_bench.txt" | tee -a "$summary"
fi

if want bench; then
  # BENCH_ONLY narrows it to one part (decode, prefill, long, variants), to fit a call's time.
  step_timeout 300 "$bin/soartune-bench" --only "${BENCH_ONLY:-all}" --json "$OUT/results.jsonl" >"$OUT/bench.txt" 2>&1
  note "soartune-bench --only ${BENCH_ONLY:-all}: rc=$?"
fi

# One layer's linears through the GEMV, the expansion to bf16 + cuBLAS and the quantised-weight GEMM
# (kernels/qgemm.cuh), 1 to 4096 rows, on the llama3-8b and minicpm-sala-9b shapes (LINEAR_WEIGHTS, default
# int8 and int4 g128): the rows at which CudaModel::linear changes path. With a baseline in the bundle (bundle
# --baseline=DIR), its soartune-bench and kernel library run the same right after, into baseline_linear_<model>.*.
if want linear; then
  for m in llama3-8b minicpm-sala-9b; do
    for build in this baseline; do
      exe="$bin/soartune-bench" lib_path="${LD_LIBRARY_PATH:-}" tag=""
      if [[ "$build" == baseline ]]; then
        [[ -x "$bin/baseline/soartune-bench" ]] || continue
        exe="$bin/baseline/soartune-bench" lib_path="$bin/baseline/lib:${LD_LIBRARY_PATH:-}" tag="baseline_"
      fi
      LD_LIBRARY_PATH="$lib_path" step_timeout 150 "$exe" --only linear --model "synthetic:$m" \
        $(for w in ${LINEAR_WEIGHTS:-int8 int4g128}; do printf -- '--weights %s ' "$w"; done) \
        --json "$OUT/${tag}linear_$m.jsonl" >"$OUT/${tag}linear_$m.txt" 2>&1
      note "$build soartune-bench --only linear --model synthetic:$m: rc=$?"
      grep -E '^lin_(gemm|qgemm)' "$OUT/${tag}linear_$m.txt" | tee -a "$summary"
    done
  done
fi

if want peer; then
  PYTHONUNBUFFERED=1 step_timeout 180 python3 "$here/scripts/torch_peer.py" --json "$OUT/results.jsonl" >>"$OUT/bench.txt" 2>&1
  note "torch peer: rc=$?"
fi

# Attention kernels alone (tests/kernels/attention_timing.cu); an attention_timing_before put into the bundle
# by hand (the same program built from the previous sources) runs in the same call, for side-by-side figures.
if want timing; then
  for t in attention_timing_before attention_timing; do
    [[ -x "$bin/$t" ]] || continue
    step_timeout 200 "$bin/$t" >"$OUT/$t.txt" 2>&1
    note "$t: rc=$? ($OUT/$t.txt)"
  done
fi

# A new kernel's GPU tests, then its timing program: $1 names the logs, $2 is the gtest filter, $3 the tests'
# time limit, $4 what of their log goes into the summary, $5 the timing program (copied whole into the summary).
kernel_tests_then_timing() {
  step_timeout "$3" "$bin/soartune_kernel_gpu_tests" --gtest_color=no --gtest_filter="$2" >"$OUT/$1_tests.log" 2>&1
  note "$1 tests (gpu): rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) .*tests?[,.]' "$OUT/$1_tests.log" | tr '\n' ' ')"
  grep -E "$4" "$OUT/$1_tests.log" | head -40 | tee -a "$summary"
  memcheck_failures "$1" "$bin/soartune_kernel_gpu_tests" "$OUT/$1_tests.log"
  if [[ -x "$bin/$5" ]]; then
    step_timeout 240 "$bin/$5" >"$OUT/$5.txt" 2>&1
    note "$5: rc=$? ($OUT/$5.txt)"
    tee -a "$summary" <"$OUT/$5.txt"
  else
    note "$5: not in the bundle (BUNDLE_EXES)"
  fi
}

# Lightning attention (MiniCPM-SALA): its GPU tests against the CPU twins, then its timing program
# (tests/kernels/lightning_timing.cu, the release shape: decode batch 1 / 8 / 64, prefill of 4k and 60k tokens).
if want lightning; then
  kernel_tests_then_timing lightning 'Lightning*:OutputGate*' 200 \
    '^\[  FAILED|Failure|error|Expected|Which is|normalized|output of|state of' lightning_timing
fi

# The lightning kernels under compute-sanitizer: memcheck, racecheck (the decode step's and the output gate's
# shared partial sums) and synccheck, on the small shapes: decode steps at batch 1 / 8 / 64 of head_dim 64 and
# 128 (all four decode tilings), two- and three-token prefills beside a decode, every output-gate width and row
# count, q/k norm + RoPE.
# Bundle with BUNDLE_EXES="soartune_kernel_gpu_tests".
if want lightning_sanitizer; then
  if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck synccheck; do
      step_timeout 120 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/soartune_kernel_gpu_tests" --gtest_color=no \
        --gtest_filter='Lightning.DecodeStepsAtBatch1And8And64:Lightning.TwoAndThreeTokenPrefillsBesideAOneTokenPrompt:OutputGate.*:LightningQk.*' \
        >"$OUT/lightning_sanitizer_$tool.log" 2>&1
      note "compute-sanitizer $tool on the small lightning tests: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/lightning_sanitizer_$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED|SKIPPED) .*tests?[,.]' "$OUT/lightning_sanitizer_$tool.log" | tr '\n' ' ')"
    done
  else
    note "compute-sanitizer: not found"
  fi
fi

# InfLLM-v2 sparse attention (kernels/sparse_attention.cu): its GPU tests against the CPU twin (>= 16k-token
# contexts, dense_len lowered), then one softmax layer at 60k tokens, sparse against the dense paged kernels
# (tests/kernels/sparse_attention_timing.cu). Bundle with BUNDLE_EXES="soartune_kernel_gpu_tests sparse_attention_timing".
if want sparse; then
  kernel_tests_then_timing sparse 'SparseAttention*' 300 '^rows|^plan|^mismatch|Failure|FAILED' sparse_attention_timing
fi

# The sparse attention kernels under compute-sanitizer: memcheck, racecheck (the attend kernel reuses its tile
# buffers for the warps' merge) and synccheck on the small-shape test (tiny-sala's heads, 2-3k tokens). Bundle
# with BUNDLE_EXES="soartune_kernel_gpu_tests".
if want sparse_sanitizer; then
  if command -v compute-sanitizer >/dev/null; then
    for tool in ${SPARSE_SANITIZER_TOOLS:-memcheck racecheck synccheck}; do
      step_timeout 150 compute-sanitizer --tool "$tool" --error-exitcode 9 "$bin/soartune_kernel_gpu_tests" \
        --gtest_color=no --gtest_filter='SparseAttentionGpu.SmallShapesMatchTwin' >"$OUT/sparse_sanitizer_$tool.log" 2>&1
      note "compute-sanitizer $tool on the small sparse attention test: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sparse_sanitizer_$tool.log" | tail -1) $(grep -E '^\[  (PASSED|FAILED|SKIPPED) .*tests?[,.]' "$OUT/sparse_sanitizer_$tool.log" | tr '\n' ' ')"
    done
  else
    note "compute-sanitizer: not found"
  fi
fi

# `baseline`: an earlier build's timing programs (bundle --baseline=DIR) beside this build's, in the same call and on
# the same card: soartune-bench --only sala (SALA_REPS, SALA_ARGS as in sala_bench), lightning_timing and
# sparse_attention_timing, each written to $OUT/baseline_<program>.txt next to the new build's own files. They run
# with the earlier build's kernel library (bin/baseline/lib first on the library path).
if want baseline; then
  if [[ -d "$bin/baseline/lib" ]] && compgen -G "$bin/baseline/lib/libsoartune_*" >/dev/null; then
    local_path="$bin/baseline/lib:$LD_LIBRARY_PATH"
    [[ -x "$bin/baseline/soartune-bench" ]] && { LD_LIBRARY_PATH="$local_path" step_timeout 200 "$bin/baseline/soartune-bench" --only sala \
      --reps "${SALA_REPS:-10}" ${SALA_ARGS:-} >"$OUT/baseline_sala_bench.txt" 2>&1
      note "baseline soartune-bench --only sala: rc=$?"; grep -E '^sala_dec|^llama_dec' "$OUT/baseline_sala_bench.txt" | tee -a "$summary"; }
    for t in lightning_timing sparse_attention_timing; do
      [[ -x "$bin/baseline/$t" ]] || continue
      LD_LIBRARY_PATH="$local_path" step_timeout 120 "$bin/baseline/$t" >"$OUT/baseline_$t.txt" 2>&1
      note "baseline $t: rc=$?"
    done
  else
    note "baseline: no bin/baseline with its kernel library in the bundle (bundle --baseline=DIR)"
  fi
fi

# The host's share of a synthetic 8B trial (engine/bench/host_weights_bench_main.cc): the weights made and
# RTN-quantised at W8 and W4 g128, this build and a baseline build (bundle --baseline=DIR with its
# soartune-host-weights-bench) alternating, one process a line; the host's transparent huge page settings first.
if want host_weights; then
  note "transparent huge pages: enabled $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null), defrag $(cat /sys/kernel/mm/transparent_hugepage/defrag 2>/dev/null)"
  for round in 1 2; do
    for build in baseline this; do
      exe="$bin/soartune-host-weights-bench"
      [[ "$build" == baseline ]] && exe="$bin/baseline/soartune-host-weights-bench"
      [[ -x "$exe" ]] || { note "host_weights: no $exe"; continue; }
      for bits in 8 4; do
        step_timeout 120 "$exe" --model synthetic:llama3-8b --bits "$bits" --reps 1 >"$OUT/host_weights_${build}_${bits}_$round.txt" 2>&1
        note "host_weights $build W$bits round $round: rc=$? $(tr '\n' ' ' <"$OUT/host_weights_${build}_${bits}_$round.txt" | tail -c 300)"
      done
    done
  done
fi

# Whole-model decode (ctx 512, bf16 KV, batch 1 and 8) with each GEMV variant in GEMV_VARIANTS (default auto)
# forced on every layer, for the side-by-side; DECODE_WEIGHTS narrows the formats, DECODE_ARGS adds bench
# options (e.g. --kv-splits 8) and DECODE_TAG names the run in the logs. DECODE_BIN / DECODE_LIB run another
# build of soartune-bench (e.g. the previous commit's, bundled by hand under .device/old) in the same call.
if want decode; then
  for v in ${GEMV_VARIANTS:-auto}; do
    f="decode_$v${DECODE_TAG:-}"
    LD_LIBRARY_PATH="${DECODE_LIB:+$DECODE_LIB:}$LD_LIBRARY_PATH" step_timeout 200 "${DECODE_BIN:-$bin/soartune-bench}" \
      --only decode --kv bf16 --no-profile --gemv-variant "$v" ${DECODE_ARGS:-} \
      --weights ${DECODE_WEIGHTS:-bf16 int8 int4g128} --json "$OUT/$f.jsonl" >"$OUT/$f.txt" 2>&1
    note "decode, gemv_variant $v ${DECODE_ARGS:-} ${DECODE_TAG:-}: rc=$? $(grep -E '^decode ' "$OUT/$f.txt" | awk '{printf "%s b%s %s (graph %s); ", $2, $4, $6, $NF}')"
  done
fi

# Per-kernel device time of one decode step (ncu, kernels serialised, clocks and caches left alone), bf16 and
# int4 g128 weights at batch 1 and 8: the third captured step of each (NCU_WEIGHTS / NCU_BATCHES narrow it).
if want ncu_decode; then
  if command -v ncu >/dev/null; then
    for w in ${NCU_WEIGHTS:-bf16 int4g128}; do
      for b in ${NCU_BATCHES:-1}; do
        # 9 kernels a layer (norm, qkv, RoPE, attention, combine, o, norm, gate|up with SwiGLU, down) and 4
        # more: skip two steps, take one (any window of n kernels in the steady state holds one step).
        n=${NCU_STEP_KERNELS:-$((9 * 32 + 4))}
        step_timeout 240 ncu --clock-control none --cache-control none --kernel-name-base demangled \
          --kernel-name 'regex:gemv|rmsnorm|rope|attention|combine|swiglu|argmax|embedding' \
          --launch-skip $((2 * n)) --launch-count $n --metrics gpu__time_duration.sum,dram__bytes_read.sum \
          --csv --print-units base "$bin/soartune-bench" --only decode --weights "$w" --kv bf16 --batches "$b" \
          --reps 1 --no-profile --gemv-variant "${NCU_GEMV:-auto}" >"$OUT/ncu_${w}_b$b.csv" 2>"$OUT/ncu_${w}_b$b.err"
        note "ncu decode $w b$b: rc=$? ($(grep -c gpu__time_duration "$OUT/ncu_${w}_b$b.csv") kernels)"
      done
    done
  else
    note "ncu: not found"
  fi
fi

# Why a decode GEMV runs at its rate (ncu sections: speed of light, occupancy, warp stalls, issue slots, pipe
# use): NCU_GEMV_COUNT (default 4: qkv, o, gate|up, down of one layer) GEMV launches of the third decode step,
# for NCU_WEIGHTS at NCU_BATCHES, each GEMV variant in NCU_GEMV (default auto). Environment passes through
# (NCU_ENV, e.g. a kernel experiment's switch).
if want ncu_gemv; then
  if command -v ncu >/dev/null; then
    for w in ${NCU_WEIGHTS:-int4g128}; do
      for b in ${NCU_BATCHES:-1}; do
        for v in ${NCU_GEMV:-auto}; do
          f="$OUT/ncu_gemv_${w}_b${b}_${v}${NCU_TAG:-}"
          env ${NCU_ENV:-} timeout 240 ncu --clock-control none --cache-control none --kernel-name-base demangled \
            --kernel-name 'regex:gemv' --launch-skip $((2 * (4 * 32 + 1))) --launch-count "${NCU_GEMV_COUNT:-4}" \
            --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
            --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
            --csv --page details --print-units base "$bin/soartune-bench" --only decode --weights "$w" --kv bf16 \
            --batches "$b" --reps 1 --no-profile --gemv-variant "$v" >"$f.csv" 2>"$f.err"
          note "ncu gemv $w b$b $v ${NCU_ENV:-}: rc=$? ($(grep -c '"Duration"' "$f.csv") kernels)"
        done
      done
    done
  else
    note "ncu: not found"
  fi
fi

# SASS of the kernels whose mangled names contain SASS_FUN (cuobjdump of the device's toolkit), for instruction
# counts where ncu says a kernel is issue-bound.
if want sass; then
  cuobj="$(command -v cuobjdump || ls /usr/local/cuda*/bin/cuobjdump 2>/dev/null | head -1)"
  if [[ -n "$cuobj" ]]; then
    "$cuobj" -sass "$bundle/lib/libsoartune_kernels_cuda.so" 2>&1 |
      awk -v pat="${SASS_FUN:-gemv_kernel}" '/Function :/ {p = index($0, pat) > 0} p' >"$OUT/sass.txt"
    note "sass: $(grep -c 'Function :' "$OUT/sass.txt") functions matching ${SASS_FUN:-gemv_kernel}"
  else
    note "cuobjdump: not found"
  fi
fi

# GPTQ on the GPU: the GPU-vs-CPU tests (tests/kernels/gptq_cuda_gpu_test.cc), the quantisation time of every
# linear of synthetic:llama3-8b (soartune-gptq-bench; GPTQ_ARGS adds options, e.g. --lm-head), and, when the
# worker is bundled, a gptq trial on the cuda backend (its result must say solver cuda).
if want gptq; then
  if [[ -x "$bin/soartune_cuda_model_tests" ]]; then
    model_tests gptq_tests "" 'GptqCuda.*' 200 'codes differ|forward .* max|Failure|^\[  FAILED'
    # GPTQ_SANITIZER=memcheck|racecheck: the exact-Hessian test under compute-sanitizer (the block kernel's shared
    # memory and barriers, the solver's buffers), for a first run of the GPU solver.
    if [[ -n "${GPTQ_SANITIZER:-}" ]] && command -v compute-sanitizer >/dev/null; then
      step_timeout 240 compute-sanitizer --tool "$GPTQ_SANITIZER" --error-exitcode 9 "$bin/soartune_cuda_model_tests" --gtest_color=no \
        --gtest_filter='GptqCuda.EqualsTheCpuWithExactHessians' >"$OUT/gptq_sanitizer.log" 2>&1
      note "gptq $GPTQ_SANITIZER: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/gptq_sanitizer.log" | tail -1)"
    fi
  fi
  if [[ -x "$bin/soartune-gptq-bench" ]]; then
    step_timeout 300 "$bin/soartune-gptq-bench" ${GPTQ_ARGS:-} >"$OUT/gptq_bench.txt" 2>&1
    note "soartune-gptq-bench ${GPTQ_ARGS:-}: rc=$?"
    grep -vE '^layer ' "$OUT/gptq_bench.txt" | tail -12 | tee -a "$summary"
  fi
  if [[ -x "$bin/soartune-worker" ]]; then
    cat >"$OUT/gptq_trial.yaml" <<'YAML'
model: synthetic:tiny
backend: cuda
seed: 1
launch: {weight_bits: 4, weight_group_size: 64, quant_method: gptq}
workload:
  name: gptq-cuda
  requests:
    - {name: a, input_len: 16, output_len: 8, count: 2}
tiers: [1]
accuracy: {set: synthetic, samples: 4, prompt_len: 32, continuation_len: 16}
calibration: {samples: 8}
YAML
    step_timeout 120 "$bin/soartune-worker" --trial "$OUT/gptq_trial.yaml" >"$OUT/gptq_worker.json" 2>"$OUT/gptq_worker.log"
    note "gptq worker trial (backend cuda): rc=$? $(grep -o '"quantization":{[^}]*}' "$OUT/gptq_worker.json")"
    grep -E 'gptq' "$OUT/gptq_worker.log" | tail -3 | tee -a "$summary"
    # The 8B shape end to end through the worker (issue 19's quantisation time): W4 g128 GPTQ of every linear of
    # synthetic:llama3-8b with the job default's 48 calibration rows (48 tokens each), the calibration forward
    # included; the result's quantization.seconds and timings_s say where the time went.
    sed -e 's/synthetic:tiny/synthetic:llama3-8b/' -e 's/weight_group_size: 64/weight_group_size: 128/' \
      -e 's/calibration: {samples: 8}/calibration: {samples: 48}/' "$OUT/gptq_trial.yaml" >"$OUT/gptq_trial_8b.yaml"
    step_timeout 240 "$bin/soartune-worker" --trial "$OUT/gptq_trial_8b.yaml" >"$OUT/gptq_worker_8b.json" 2>"$OUT/gptq_worker_8b.log"
    note "gptq worker trial, llama3-8b W4 g128, 48 calibration rows (backend cuda): rc=$? $(grep -o '"quantization":{[^}]*}' "$OUT/gptq_worker_8b.json") $(grep -o '"timings_s":{[^}]*}' "$OUT/gptq_worker_8b.json")"
    grep -E 'gptq' "$OUT/gptq_worker_8b.log" | tail -3 | tee -a "$summary"
  fi
fi

if want sanitizer; then
  if command -v compute-sanitizer >/dev/null; then
    # SANITIZER_FILTER narrows it to some tests (e.g. 'Lightning*:SparseAttention*' for new kernels) and
    # SANITIZER_TOOL picks another tool (racecheck, synccheck, initcheck). By default the sparse attention tests
    # on 16k-25k-token contexts are left out (under memcheck they would take this step's time): their small-shape
    # sibling stands in for them (and runs under every tool in step sparse_sanitizer).
    step_timeout "${SANITIZER_TIMEOUT:-200}" compute-sanitizer --tool "${SANITIZER_TOOL:-memcheck}" --error-exitcode 9 \
      "$bin/soartune_kernel_gpu_tests" --gtest_color=no \
      --gtest_filter="${SANITIZER_FILTER:--SparseAttentionGpu.Decode*:SparseAttentionGpu.Prefill*}" >"$OUT/sanitizer.log" 2>&1
    rc=$?
    note "compute-sanitizer ${SANITIZER_TOOL:-memcheck} on kernel tests ${SANITIZER_FILTER:-}: rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -1)"
    grep -E '^========= (Invalid|Race|Barrier|Uninitialized|Program hit|    at )' "$OUT/sanitizer.log" | head -12 | tee -a "$summary"
  else
    note "compute-sanitizer: not found"
  fi
fi

if want e2e; then
  {
    if [[ -x "$bin/soartune-worker" ]]; then
      cat >"$OUT/trial.yaml" <<'YAML'
model: synthetic:tiny
backend: cuda
seed: 1
launch: {weight_bits: 4, weight_group_size: 64, kv_cache_dtype: fp8_e4m3}
workload:
  name: e2e-cuda
  requests:
    - {name: short-long, input_len: 16, output_len: 64, count: 4}
    - {name: long-short, input_len: 256, output_len: 8, count: 4}
tiers: [1, 8, 0]
accuracy: {set: synthetic, samples: 8, prompt_len: 32, continuation_len: 16}
YAML
      echo "== soartune-worker --trial (backend cuda)"
      step_timeout 120 "$bin/soartune-worker" --trial "$OUT/trial.yaml"
      echo "worker rc=$?"
    else
      echo "soartune-worker not in the bundle"
    fi
    if [[ -x "$bin/soartuned" && -x "$bin/soartune" ]]; then
      echo "== soartuned + soartune submit (backend cuda)"
      work="$(mktemp -d)"
      port=50000 ; port=$((port + RANDOM % 1000))
      cat >"$work/daemon.yaml" <<YAML
listen: 127.0.0.1:$port
database: $work/soartune.db
worker: $bin/soartune-worker
parallel_trials: 1
devices: [cuda:0]
work_dir: $work/trials
log_level: info
YAML
      "$bin/soartuned" --config "$work/daemon.yaml" >"$work/daemon.log" 2>&1 &
      dpid=$!
      sleep 2
      cat >"$work/job.yaml" <<'YAML'
name: e2e-cuda
model: synthetic:tiny
backend: cuda
seed: 1
budget: {trials: 12}
trial_timeout_s: 120
workload:
  name: e2e-cuda
  requests:
    - {name: short-long, input_len: 16, output_len: 32, count: 4}
accuracy: {set: synthetic, samples: 4}
space:
  weight_bits: {type: choice, values: [16, 8, 4]}
  kv_cache_dtype: {type: choice, values: [bf16, fp8_e4m3]}
YAML
      job="$(step_timeout 30 "$bin/soartune" --addr 127.0.0.1:$port submit "$work/job.yaml" 2>&1 | tail -1)"
      echo "submitted: $job"
      step_timeout 200 "$bin/soartune" --addr 127.0.0.1:$port watch "$job" 2>&1 | tail -5
      step_timeout 30 "$bin/soartune" --addr 127.0.0.1:$port trials "$job" 2>&1 | tail -8
      kill "$dpid" 2>/dev/null
      wait "$dpid" 2>/dev/null
      tail -20 "$work/daemon.log"
    else
      echo "soartuned / soartune not in the bundle"
    fi
  } >"$OUT/e2e.log" 2>&1
  note "e2e: $(grep -E 'worker rc=|"ok"' "$OUT/e2e.log" | head -2 | cut -c1-200 | tr '\n' ' ')"
fi

# GPU-measured landscapes (issue 21): a replay table recorded by run_tiny_fidelity_grid.py at fidelities 1/9, 1/3, 1,
# each config TABLE_REPEATS times (default 2), configs started until TABLE_DEADLINE seconds (default 200) have
# passed; then bo_bench's multi-fidelity and replay benchmarks and the BoTorch peer on that table, each bounded (the
# peer: 15 seeds, one per process beside the timing run, 60 s each, so that one wave of 16 processes finishes in
# time). $1: the step's name (its files' prefix), $2: the recorder's --backend, $3: the table's file name.
record_table() {
  local step="$1" setup="$2" table="$OUT/$3" deadline="${TABLE_DEADLINE:-200}" t0 rows
  t0=$(date +%s)
  PYTHONUNBUFFERED=1 step_timeout $((deadline + 150)) python3 "$here/search/bench/data/run_tiny_fidelity_grid.py" "$bundle" \
    --backend "$setup" --model "$bundle/shared/models/tiny-llama-bpe4k" --repeats "${TABLE_REPEATS:-2}" \
    --deadline "$deadline" ${TABLE_ARGS:-} >"$table" 2>"$OUT/$step.log"
  note "$step: rc=$? in $(( $(date +%s) - t0 )) s, $(($(wc -l <"$table") - 1)) rows; $(tail -1 "$OUT/$step.log")"
  if [[ ! -x "$bin/bo_bench" ]]; then
    note "bo_bench not in the bundle (BUNDLE_EXES)"
    return
  fi
  rows=$(($(wc -l <"$table") - 1))
  { step_timeout 60 "$bin/bo_bench" --landscape fidelity --fidelity-table "$table" --seeds 20 --budget "$rows"
    step_timeout 60 "$bin/bo_bench" --landscape fidelity --fidelity-table "$table" --seeds 20 --budget "$rows" \
      --levels 0.333333,1; } >"$OUT/${step}_bo_bench_fidelity.txt" 2>&1
  note "$step bo_bench fidelity: $(grep -E 'bayes / mf-bayes' "$OUT/${step}_bo_bench_fidelity.txt" | tr '\n' ' ')"
  step_timeout 90 "$bin/bo_bench" --landscape replay --replay-table "$table" --seeds 20 --budget 100 \
    --random-budget 1000 >"$OUT/${step}_bo_bench_replay.txt" 2>&1
  note "$step bo_bench replay: $(grep -E 'random / bayes' "$OUT/${step}_bo_bench_replay.txt")"
  "$bin/bo_bench" --landscape replay --replay-table "$table" --export-landscape "$OUT/${step}_replay_landscape.csv" \
    >>"$OUT/${step}_bo_bench_replay.txt" 2>&1
  PYTHONUNBUFFERED=1 step_timeout 80 python3 "$here/scripts/botorch_peer.py" "$OUT/${step}_replay_landscape.csv" --no-noise \
    --seeds 15 --budget 60 --procs 16 --deadline 60 --json "$OUT/${step}_botorch_replay.json" \
    >"$OUT/${step}_botorch_replay.txt" 2>&1
  note "$step botorch peer (replay): rc=$? $(grep -E '"median_trials"|"unfinished"' "$OUT/${step}_botorch_replay.txt" | tr -d ' \n')"
}

# `tables`: tiny-llama-bpe4k with real accuracy, the 48-config GPU grid (on the H200, run 72: 4.3 s of references
# and about 6.5 s a config, 45 configs in 295 s at TABLE_DEADLINE=300, 331 s with what follows: the whole grid takes
# TABLE_DEADLINE=330, a call of its own). TABLE_BACKEND=cpu and TABLE_ARGS (e.g. --limit 2) check the step's
# plumbing without a GPU.
if want tables; then
  record_table tables "${TABLE_BACKEND:-cuda}" tiny_gpu_fidelity_trials.csv
fi

# `tables8b`: the 8B shape with proxy accuracy (the recorder's cuda-8b setup: synthetic:llama3-8b timed on
# race-gpu-short, accuracy of the same launch on tiny-llama-bpe4k; 18 configs). A trial of this shape took 33-52 s
# in run 69, so one call records a part of the grid (configs start in a seeded random order: the part is a uniform
# sample); TABLE_ARGS="--skip EARLIER.csv" continues an earlier part in a later call. Two tables are committed, one
# a card: llama3_8b_gpu_fidelity_trials.csv (an H100, run 84: 16 configs, one repeat, about 45 s a config) and
# llama3_8b_h200_fidelity_trials.csv (the H200, runs 86-89: 18 configs, a second repeat of 4, about 52 s a config).
# TABLE_REPEATS=1 TABLE_ARGS="--first-repeat 1 --skip search/bench/data/llama3_8b_h200_fidelity_trials.csv" adds
# second repeats to the H200's (check the card first: rows of another card do not belong in it; `--list` prints
# what a call would run). TABLE_ARGS="--timed-model synthetic:tiny --worker-backend cpu --limit 1" checks the plumbing
# without a GPU.
if want tables8b; then
  record_table tables8b cuda-8b llama3_8b_gpu_fidelity_trials.csv
fi

# A daemon for the job steps: soartuned on a free port in a fresh directory, run from .device/run so that a job's
# ../shared paths name the bundle's models; sets $port and $dpid, and cli() talks to it. $1 names its log.
start_job_daemon() {
  local work
  work="$(mktemp -d)"
  port=$(( $2 + RANDOM % 1000 ))
  mkdir -p "$bundle/run"
  cat >"$work/daemon.yaml" <<YAML
listen: 127.0.0.1:$port
database: $work/soartune.db
worker: $bin/soartune-worker
parallel_trials: 1
devices: [cuda:0]
work_dir: $work/trials
data_roots: [$bundle, $here/configs]
log_level: info
YAML
  (cd "$bundle/run" && exec "$bin/soartuned" --config "$work/daemon.yaml") >"$OUT/$1_daemon.log" 2>&1 &
  dpid=$!
  sleep 2
}
cli() { step_timeout 30 "$bin/soartune" --addr 127.0.0.1:$port "$@"; }
stop_job_daemon() { kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; }

# The 8B shape through soartuned (issue 21): configs/jobs/h200-llama3-8b-mf.yaml (multi-fidelity, accuracy on the
# tiny model as a proxy), the daemon run from .device/run so that the job's ../shared paths name the bundle's
# model; the CLI's views of the finished job and the wall time from submission to the end. JOB8B_SPEC submits
# another job file instead (e.g. a CPU job, to check the step's plumbing without a GPU).
if want job8b; then
  {
    start_job_daemon job8b 51000
    t0=$(date +%s.%N)
    job="$(cli submit "${JOB8B_SPEC:-$here/configs/jobs/h200-llama3-8b-mf.yaml}" 2>&1 | tail -1)"
    echo "submitted: $job"
    step_timeout "${JOB8B_TIMEOUT:-250}" "$bin/soartune" --addr 127.0.0.1:$port watch "$job" 2>&1 | tail -30
    echo "watch rc=${PIPESTATUS[0]}"
    echo "job wall time: $(python3 -c "import sys; print(round($(date +%s.%N) - $t0, 1))") s"
    echo "== jobs"; cli jobs
    echo "== status"; cli status "$job"
    echo "== trials"; cli trials "$job"
    cli trials "$job" --json >"$OUT/job8b_trials.json"
    echo "== best"; cli best "$job"
    n=$(python3 -c "import json; print(len(json.load(open('$OUT/job8b_trials.json'))['trials']))" 2>/dev/null || echo 0)
    for ((t = 0; t < n; ++t)); do echo "== show $t"; cli show "$job" "$t"; done
    echo "== export (best)"; cli export "$job"
    echo "== quantised full-fidelity trials and the gate"
    python3 - "$OUT/job8b_trials.json" <<'PY'
import json, sys
for t in json.load(open(sys.argv[1]))["trials"]:
    p = t["params"]
    quant = str(p.get("weight_bits", 16)) != "16" or str(p.get("kv_cache_dtype", "bf16")).startswith("fp8")
    print(f"trial {t['number']:>2} fidelity {t['fidelity']:.3g} {t['status']:<9} {json.dumps(p)} accuracy "
          f"{t['relative_accuracy']:.2f}% (proxy {t['accuracy_proxy']}) gate {t['gate']} score {t['score']:.2f}"
          f"{'  QUANTISED' if quant else ''}{'  CLEARS THE GATE' if quant and t['gate'] > 0 and t['fidelity'] >= 1 else ''}")
PY
    stop_job_daemon
  } >"$OUT/job8b.log" 2>&1
  note "job8b: $(grep -E 'job wall time|watch rc' "$OUT/job8b.log" | tr '\n' ' ') $(grep -c 'CLEARS THE GATE' "$OUT/job8b.log") quantised full runs clear the gate"
fi

# MiniCPM-SALA through soartuned (issue 18): configs/jobs/h200-minicpm-sala-9b.yaml (the release's shape with
# synthetic weights, proxy accuracy on the bundled tiny-sala: bundle with --with-sala-gz), the daemon run from
# .device/run as in job8b. Writes the CLI's views, the best trial's export as a trial file
# (sala_job_export.yaml), SGLang flags (sala_job_sglang_args.txt) and env script (sala_job_prepare_env.sh), and
# checks that the job SUCCEEDED and that the export carries the SALA knobs. SALA_JOB_SPEC submits another job
# file (e.g. the same job on the CPU backend and synthetic:tiny-sala, to check the step without a GPU).
if want sala_job; then
  {
    start_job_daemon sala_job 52000
    t0=$(date +%s.%N)
    job="$(cli submit "${SALA_JOB_SPEC:-$here/configs/jobs/h200-minicpm-sala-9b.yaml}" 2>&1 | tail -1)"
    echo "submitted: $job"
    step_timeout "${SALA_JOB_TIMEOUT:-230}" "$bin/soartune" --addr 127.0.0.1:$port watch "$job" 2>&1 | tail -30
    echo "watch rc=${PIPESTATUS[0]}"
    echo "job wall time: $(python3 -c "print(round($(date +%s.%N) - $t0, 1))") s"
    echo "== status"; cli status "$job"
    echo "== trials"; cli trials "$job"
    cli trials "$job" --json >"$OUT/sala_job_trials.json"
    echo "== best"; cli best "$job"
    n=$(python3 -c "import json; print(len(json.load(open('$OUT/sala_job_trials.json'))['trials']))" 2>/dev/null || echo 0)
    for ((t = 0; t < n; ++t)); do echo "== show $t"; cli show "$job" "$t"; done
    echo "== export (best): yaml, sglang-args, env-script"
    cli export "$job" -o "$OUT/sala_job_export.yaml"
    cli export "$job" --format sglang-args -o "$OUT/sala_job_sglang_args.txt"
    cli export "$job" --format env-script -o "$OUT/sala_job_prepare_env.sh"
    cat "$OUT/sala_job_export.yaml" "$OUT/sala_job_sglang_args.txt"
    echo "== checks"
    if cli status "$job" | grep -qE 'state +SUCCEEDED'; then echo "job state: SUCCEEDED"; else echo "job state: NOT SUCCEEDED"; fi
    missing=""
    for k in lightning_state_dtype lightning_chunk softmax_attn_bits lightning_attn_bits mlp_bits kv_cache_dtype \
      max_running_requests sparse_attention; do
      grep -qE "^  $k: " "$OUT/sala_job_export.yaml" 2>/dev/null || missing="$missing $k"
    done
    echo "export knobs: ${missing:+MISSING$missing}${missing:-all SALA knobs present}"
    stop_job_daemon
  } >"$OUT/sala_job.log" 2>&1
  note "sala_job: $(grep -E '^job wall time|^watch rc|^job state|^export knobs|SUCCEEDED \(|FAILED' "$OUT/sala_job.log" | tr '\n' ' ')"
fi

# The summary table, last.
if [[ -s "$OUT/results.jsonl" ]]; then
  python3 - "$OUT/results.jsonl" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ceil = next((r for r in rows if r.get("what") == "ceiling"), {})
print(f"ceilings: copy {ceil.get('copy_gbps', 0):.0f} GB/s, bf16 GEMM {ceil.get('bf16_tflops', 0):.0f} TFLOP/s")
peer = {(r["what"], r["batch"]): r["ms"] for r in rows if r["what"].startswith("peer")}
print(f"{'what':10} {'weights':9} {'kv':9} {'bs':>3} {'ctx':>6} {'ms':>9} {'roof':>8} {'gap':>6} {'peer':>8}")
for r in rows:
    if r["what"] in ("ceiling",) or r["what"].startswith("peer"):
        continue
    p = ""
    if r["weights"] == "bf16" and r["kv"] == "bf16":
        key = ("peer_decode" if r["what"] == "decode" else "peer_prefill", r["batch"])
        if r["what"] in ("decode", "prefill") and key in peer:
            p = f"{peer[key]:.3f}"
    print(f"{r['what']:10} {r['weights']:9} {r['kv']:9} {r['batch']:>3} {r['context']:>6} {r['ms']:>9.3f} "
          f"{r['roofline_ms']:>8.3f} {r['ms']/r['roofline_ms']:>5.2f}x {p:>8}")
for (w, b), ms in sorted(peer.items()):
    print(f"peer {w} batch {b}: {ms:.3f} ms")
PY
fi

# The device call brings back at most 8 files from $OUT: past 7, everything but the summary and earlier archives
# goes into one archive (logs.tgz, then logs-2.tgz, ... when one call runs the script several times), so that
# no table or log is left behind.
n_out=$(find "$OUT" -maxdepth 1 -type f | wc -l)
if (( n_out > 7 )); then
  archive=logs.tgz
  for i in 2 3 4 5 6; do [[ -e "$OUT/$archive" ]] && archive="logs-$i.tgz"; done
  (cd "$OUT" && find . -maxdepth 1 -type f ! -name summary.txt ! -name 'logs*.tgz' -printf '%P\n' | tar czf "$archive" -T - \
    && find . -maxdepth 1 -type f ! -name summary.txt ! -name 'logs*.tgz' -delete)
  echo "outputs packed into $OUT/$archive ($n_out files)"
fi
