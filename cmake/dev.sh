#!/usr/bin/env bash
# Kiln's developer commands; CI runs `test` (.ci/run).
#
#   bash cmake/dev.sh example   install dependencies, build build/ (Release) and
#                               run the main example
#   bash cmake/dev.sh test      install dependencies; check the format of the
#                               changed lines (as `format`); build and test build/
#                               (-Werror), then build-asan/ (AddressSanitizer +
#                               UBSan, Debug), then build-tsan/ (ThreadSanitizer,
#                               Debug: the tests labelled `tsan`, see
#                               configure_build_tsan), then fuzz the parsers of what
#                               users send (build-fuzz/, clang and libFuzzer,
#                               KILN_FUZZ_SECONDS a target, default 30),
#                               then check that the committed API schema is
#                               what tools/schema/generate-schema.py gives;
#                               non-zero exit if any step fails
#   bash cmake/dev.sh format [BASE]
#                               check with `git clang-format` (.clang-format)
#                               that the C++ lines changed since BASE are
#                               formatted. BASE: the argument, else
#                               $KILN_FORMAT_BASE, else the merge-base with
#                               origin/main when HEAD is not on it, else HEAD~1
#                               (a fresh clone of main checks its last commit).
#                               Fix with `git clang-format BASE`.
#   bash cmake/dev.sh tsan      only test's ThreadSanitizer step (build-tsan/)
#   bash cmake/dev.sh tidy      clang-tidy (.clang-tidy) over lib/, with
#                               build/'s compile_commands.json (slow; not in CI)
#
# All work from any directory and build in the repository root. The machine
# has 2 cores: builds and ctest use -j2 (override with KILN_JOBS).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
JOBS="${KILN_JOBS:-2}"

# Sanitizer reports stop the test at the first error, with a stack trace.
# Options already in the environment come last, so they win.
export ASAN_OPTIONS="halt_on_error=1:print_stacktrace=1:detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1${TSAN_OPTIONS:+:$TSAN_OPTIONS}"

log() { printf '\n==> %s\n' "$*"; }

install_deps() {
  log "dependencies"
  bash "$ROOT/cmake/install-deps.sh"
}

# ---------------------------------------------------------------------------
# THE MAIN EXAMPLE: the one place that says what `dev.sh example` runs
# (from the repository root, after build/ is built).
run_main_example() {
  # The quickstart: three small jobs on this machine (local backend, real
  # processes), the second and third on the first one's warm pool. Then the
  # engine in virtual time, and `kiln validate` on the request corpus.
  build/examples/quickstart/quickstart
  echo
  build/examples/lifecycle/lifecycle
  echo
  build/tools/kiln/kiln validate tests/corpus/*.json
}
# ---------------------------------------------------------------------------

cmd_example() {
  install_deps
  log "configure build/ (Release)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  log "build build/"
  cmake --build build -j "$JOBS"
  log "main example"
  run_main_example
}

# Steps of `test` and their outcomes, for the summary.
SUMMARY=()
FAILED=0

# step NAME COMMAND...: runs the command, records pass/fail and seconds.
step() {
  local name="$1"
  shift
  log "$name"
  local start=$SECONDS rc=0
  "$@" || rc=$?
  local took=$((SECONDS - start))
  if ((rc == 0)); then
    SUMMARY+=("$(printf 'ok    %-28s %4ss' "$name" "$took")")
  else
    SUMMARY+=("$(printf 'FAIL  %-28s %4ss  (exit %s)' "$name" "$took" "$rc")")
    FAILED=1
  fi
  return "$rc"
}

# configure_build_test DIR CMAKE_ARGS...: a build directory, configured, built
# and tested; a later step is skipped when an earlier one fails.
configure_build_test() {
  local dir="$1"
  shift
  step "$dir: configure" cmake -S . -B "$dir" "$@" || return 0
  step "$dir: build" cmake --build "$dir" -j "$JOBS" || return 0
  step "$dir: ctest" ctest --test-dir "$dir" --output-on-failure --no-tests=error -j "$JOBS" \
    || return 0
}

# The libFuzzer targets (tests/fuzz), built with clang, each run for
# KILN_FUZZ_SECONDS on seeds from the repository.
configure_build_fuzz() {
  step "build-fuzz: configure" env CC=clang CXX=clang++ cmake -S . -B build-fuzz \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON -DKILN_BUILD_TESTS=OFF \
    -DKILN_BUILD_BENCHMARKS=OFF -DKILN_BUILD_EXAMPLES=OFF || return 0
  step "build-fuzz: build" cmake --build build-fuzz -j "$JOBS" \
    --target kiln_fuzz_archive kiln_fuzz_request kiln_fuzz_scenario || return 0
  step "build-fuzz: fuzz" bash tests/fuzz/run.sh build-fuzz "${KILN_FUZZ_SECONDS:-30}" || return 0
}

# The ThreadSanitizer set (build-tsan/, Debug): the tests labelled `tsan` in
# tests/CMakeLists.txt (the real-time event loop and the engine on it, the
# conformance suites, the local backend's threaded tests). Only their programs
# are built (the target kiln_tests_tsan) and only they run. To add a test
# program to the set, add the word TSAN to its kiln_add_test line. Debian's
# Abseil is not instrumented: tests/tsan/absl_sync_annotations.cc tells TSan
# what its mutexes order. Programs that start no thread are left to ASan.
configure_build_tsan() {
  step "build-tsan: configure" cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug \
    -DKILN_SANITIZE_THREAD=ON -DKILN_WERROR=ON -DKILN_BUILD_BENCHMARKS=OFF \
    -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_TOOLS=OFF || return 0
  step "build-tsan: build" cmake --build build-tsan -j "$JOBS" --target kiln_tests_tsan \
    || return 0
  step "build-tsan: ctest" ctest --test-dir build-tsan --output-on-failure --no-tests=error \
    -j "$JOBS" -L '^tsan$' || return 0
}

# The base revision of the format check (see the header).
format_base() {
  if [[ -n "${1:-}" ]]; then
    echo "$1"
  elif [[ -n "${KILN_FORMAT_BASE:-}" ]]; then
    echo "$KILN_FORMAT_BASE"
  elif git rev-parse -q --verify origin/main >/dev/null \
    && ! git merge-base --is-ancestor HEAD origin/main; then
    git merge-base HEAD origin/main
  elif git rev-parse -q --verify HEAD~1 >/dev/null; then
    echo HEAD~1
  fi
}

# format [BASE]: the C++ lines changed since BASE (committed or not) are as
# clang-format would write them. Generated code is left out.
cmd_format() {
  local base
  base="$(format_base "${1:-}")"
  if [[ -z "$base" ]]; then
    echo "format: no base revision (a single-commit clone): nothing to compare"
    return 0
  fi
  local out rc=0
  out="$(git clang-format --diff --extensions cc,h "$base" -- . ':!lib/core/schema/*' 2>&1)" \
    || rc=$?
  local clean='^(no modified files to format|clang-format did not modify any files)$'
  if ((rc == 0)) && { [[ -z "$out" ]] || grep -Eq "$clean" <<<"$out"; }; then
    echo "format: the C++ lines changed since $base are formatted"
    return 0
  fi
  printf '%s\n' "$out"
  echo "format: the lines above differ from .clang-format; run: git clang-format $base" >&2
  return 1
}

# tidy: clang-tidy over lib/ (the compile commands of build/).
cmd_tidy() {
  command -v clang-tidy >/dev/null || { echo "tidy: needs clang-tidy (apt-get install clang-tidy)" >&2; return 1; }
  cmake -S . -B build -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
  # Generated protobuf code is built first so that its headers exist.
  cmake --build build -j "$JOBS" --target kiln_core
  git ls-files 'lib/*.cc' ':!lib/core/schema/*' \
    | xargs -P "$JOBS" -n 4 clang-tidy -p build --quiet
}

cmd_test() {
  local start=$SECONDS
  step "dependencies" bash "$ROOT/cmake/install-deps.sh" || true
  if ((FAILED == 0)); then
    step "format" cmd_format || true
    configure_build_test build -DCMAKE_BUILD_TYPE=Release -DKILN_WERROR=ON
    # Debug: on 2 cores an optimised sanitizer build takes several times as
    # long to compile as the tests take to run unoptimised.
    configure_build_test build-asan -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON \
      -DKILN_WERROR=ON -DKILN_BUILD_BENCHMARKS=OFF
    configure_build_tsan
    configure_build_fuzz
  fi
  # The committed API schema is what the service model gives.
  step "generated files" python3 tools/schema/generate-schema.py --check || true
  log "summary ($((SECONDS - start))s)"
  printf '%s\n' "${SUMMARY[@]}"
  if ((FAILED)); then
    echo "dev.sh test: FAILED"
    return 1
  fi
  echo "dev.sh test: all passed"
}

# tsan: the ThreadSanitizer step of `test` alone.
cmd_tsan() {
  configure_build_tsan
  printf '%s\n' "${SUMMARY[@]}"
  return "$FAILED"
}

usage() {
  sed -n '2,/^[^#]/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

case "${1:-}" in
  example) cmd_example ;;
  test) cmd_test ;;
  tsan) cmd_tsan ;;
  format) cmd_format "${2:-}" ;;
  tidy) cmd_tidy ;;
  -h | --help | help) usage ;;
  *)
    usage >&2
    exit 2
    ;;
esac
