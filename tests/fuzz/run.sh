#!/usr/bin/env bash
# Runs each libFuzzer target of a KILN_FUZZ build for a while, starting from
# seeds taken from the repository (request and scenario examples, tarballs
# made here). A crash, a sanitizer report or a leak fails the run and leaves
# the input in the work directory, named by the fuzzer.
#
#   tests/fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET]
set -euo pipefail
build="$(cd "$1" && pwd)"
seconds="${2:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
work="$(mktemp -d /tmp/kiln-fuzz-XXXXXX)"
echo "fuzz: work directory $work"

mkdir -p "$work/seeds/request" "$work/seeds/scenario" "$work/seeds/archive" "$work/tree/opt/program"
cp "$root"/tests/corpus/*.json "$work/seeds/request/"
cp "$root"/examples/scenarios/*.json "$work/seeds/scenario/"
printf '#!/bin/sh\necho trained\n' >"$work/tree/opt/program/train"
ln -s train "$work/tree/opt/program/link"
ln "$work/tree/opt/program/train" "$work/tree/opt/program/hard"
tar -C "$work/tree" -cf "$work/seeds/archive/plain.tar" .
tar -C "$work/tree" -czf "$work/seeds/archive/gzip.tar.gz" .

status=0
for target in archive request scenario; do
  mkdir -p "$work/corpus/$target" "$work/artifacts/$target"
  echo "fuzz: kiln_fuzz_$target for ${seconds}s"
  if ! (cd "$work/artifacts/$target" &&
    "$build/tests/fuzz/kiln_fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 "$work/corpus/$target" "$work/seeds/$target" \
      >"$work/$target.log" 2>&1); then
    echo "fuzz: kiln_fuzz_$target FAILED; the last lines of its log ($work/$target.log):"
    tail -n 60 "$work/$target.log"
    status=1
  else
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$work/$target.log" || true
  fi
done
if ((status == 0)); then rm -rf "$work"; fi
exit "$status"
