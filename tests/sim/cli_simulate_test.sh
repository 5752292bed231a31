#!/usr/bin/env bash
# `kiln simulate` end to end: formats, the HTML report, determinism of the
# output for a seed, --seed, --jobs, and exit status on errors.
# Usage: cli_simulate_test.sh KILN SCENARIOS_DIR
set -u
kiln="$1"
scenarios="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; fail=1; }

scenario="$scenarios/spot_deadlines.json"
"$kiln" simulate "$scenario" >"$tmp/table.txt" 2>"$tmp/err.txt" && ok "table exits 0" || bad "table exits 0: $(cat "$tmp/err.txt")"
grep -q "^Greedy(ckpt 600s) " "$tmp/table.txt" && grep -q "^UniformProgress(ckpt 600s) " "$tmp/table.txt" && ok "table has a row per policy" || bad "table rows: $(cat "$tmp/table.txt")"
grep -q "^Best by cost at equal or better latency" "$tmp/table.txt" && ok "table names the best policy" || bad "best line"
[[ ! -s "$tmp/err.txt" ]] && ok "no progress bar when stderr is not a terminal" || bad "stderr: $(cat "$tmp/err.txt")"

"$kiln" simulate "$scenario" --format json --report "$tmp/a.html" >"$tmp/a.json" 2>/dev/null
"$kiln" simulate "$scenario" --format=json --report="$tmp/b.html" >"$tmp/b.json" 2>/dev/null
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d['policies'])==5 and d['best']" "$tmp/a.json" \
  && ok "json parses" || bad "json: $(head -c 300 "$tmp/a.json")"
cmp -s "$tmp/a.json" "$tmp/b.json" && cmp -s "$tmp/a.html" "$tmp/b.html" && ok "same seed, same bytes" || bad "outputs differ between runs"
grep -q "<svg " "$tmp/a.html" && ! grep -q "<script" "$tmp/a.html" && ok "report is self-contained HTML with SVG" || bad "report"

"$kiln" simulate "$scenario" --format csv --seed 8 >"$tmp/c8.csv" 2>/dev/null
"$kiln" simulate "$scenario" --format csv >"$tmp/c7.csv" 2>/dev/null
[[ "$(wc -l <"$tmp/c8.csv")" == 6 ]] && ! cmp -s "$tmp/c7.csv" "$tmp/c8.csv" && ok "csv; another seed, other numbers" || bad "csv/seed"

"$kiln" simulate "$scenario" --format xml >/dev/null 2>&1; [[ $? == 2 ]] && ok "bad format exits 2" || bad "bad format"
# --jobs: the policy runs in parallel give the same bytes as one after another.
"$kiln" simulate "$scenario" --jobs 1 >"$tmp/j1.txt" 2>/dev/null \
  && "$kiln" simulate "$scenario" --jobs=2 >"$tmp/j2.txt" 2>/dev/null \
  && cmp -s "$tmp/j1.txt" "$tmp/j2.txt" && cmp -s "$tmp/j1.txt" "$tmp/table.txt" \
  && ok "--jobs 1, --jobs 2 and the default print the same table" || bad "--jobs: outputs differ"
"$kiln" simulate "$scenario" --format json --report "$tmp/j1.html" --jobs 1 >"$tmp/j1.json" 2>/dev/null
"$kiln" simulate "$scenario" --format json --report "$tmp/j2.html" --jobs 2 >"$tmp/j2.json" 2>/dev/null
cmp -s "$tmp/j1.json" "$tmp/j2.json" && cmp -s "$tmp/j1.html" "$tmp/j2.html" \
  && ok "--jobs 1 and --jobs 2 give the same JSON and report" || bad "--jobs: JSON or report differ"
for value in 0 x -1 1.5 4097 99999999999999999999 ""; do
  "$kiln" simulate "$scenario" --jobs "$value" >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
  if [[ -z "$value" ]]; then want="kiln simulate: --jobs needs a number"
  else want="kiln simulate: --jobs '$value': expected an integer in [1, 4096]"; fi
  [[ $rc == 2 && ! -s "$tmp/out.txt" && "$(head -1 "$tmp/err.txt")" == "$want" ]] \
    && ok "--jobs '$value' is a usage error" \
    || bad "--jobs '$value': exit $rc, $(head -c 200 "$tmp/out.txt") $(cat "$tmp/err.txt")"
done
# Usage errors (exit 2, nothing run): an option without its value; a seed
# outside [0, INT64_MAX], the range of the scenario file's seed.
for args in "--format" "--format=" "--report" "--report=" "--seed -1" "--seed=-1" \
            "--seed 18446744073709551616" "--seed 9223372036854775808" "--seed +5" "--seed=" "--seed 1x"; do
  # shellcheck disable=SC2086
  "$kiln" simulate "$scenario" $args >"$tmp/out.txt" 2>"$tmp/err.txt"; rc=$?
  [[ $rc == 2 && ! -s "$tmp/out.txt" ]] && ok "'$args' is a usage error" \
    || bad "'$args': exit $rc, $(head -c 200 "$tmp/out.txt") $(cat "$tmp/err.txt")"
done
"$kiln" simulate "$scenario" --format csv --seed 9223372036854775807 >"$tmp/max.csv" 2>"$tmp/err.txt" \
  && [[ "$(wc -l <"$tmp/max.csv")" == 6 ]] && ok "the largest seed runs" || bad "largest seed: $(cat "$tmp/err.txt")"
printf '{"horizon": "inf", "workloads": [{"kind": "hpo", "job": {"work": "1m"}}], "policies": [{}]}' >"$tmp/inf.json"
timeout 60 "$kiln" simulate "$tmp/inf.json" >/dev/null 2>"$tmp/err.txt"; [[ $? == 1 ]] \
  && grep -q "scenario.horizon: a duration must be finite" "$tmp/err.txt" \
  && ok "an infinite horizon is an error at load" || bad "infinite horizon: $(cat "$tmp/err.txt")"
"$kiln" simulate >/dev/null 2>&1; [[ $? == 2 ]] && ok "no scenario exits 2" || bad "no scenario"
# Arguments are input: shown escaped, none can add a line to a message.
"$kiln" simulate "$scenario" --seed $'1\nkiln simulate: forged' >/dev/null 2>"$tmp/err.txt"; rc=$?
want="kiln simulate: --seed '1\nkiln simulate: forged': expected an integer in [0, "
want+="9223372036854775807]"
[[ $rc == 2 && "$(head -1 "$tmp/err.txt")" == "$want" ]] \
  && ! grep -q "^kiln simulate: forged" "$tmp/err.txt" \
  && ok "a bad --seed is shown escaped" || bad "bad seed: $(cat "$tmp/err.txt")"
"$kiln" simulate "$scenario" $'--x\x1b[2J' >/dev/null 2>"$tmp/err.txt"
[[ $? == 2 && "$(head -1 "$tmp/err.txt")" == "kiln simulate: unknown option '--x\u001b[2J'" ]] \
  && ok "an unknown option is shown escaped" || bad "unknown option: $(cat "$tmp/err.txt")"
"$kiln" simulate "$tmp/no"$'\n'"such.json" >/dev/null 2>"$tmp/err.txt"; rc=$?
want="kiln simulate: cannot read '$tmp/no\nsuch.json': No such file or directory"
[[ $rc == 1 && "$(cat "$tmp/err.txt")" == "$want" ]] \
  && ok "a scenario file name is shown escaped" || bad "file name: $(cat "$tmp/err.txt")"
"$kiln" simulate "$tmp/missing.json" >/dev/null 2>"$tmp/err.txt"; [[ $? == 1 ]] && grep -q "cannot read" "$tmp/err.txt" \
  && ok "unreadable scenario exits 1" || bad "unreadable scenario: $(cat "$tmp/err.txt")"
# Only regular files are read, the scenario and the traces it names: a
# device, a FIFO (no writer: the open must not wait) or a directory is
# refused at once. (timeout: such reads used to never end.)
mkfifo "$tmp/fifo"
mkdir "$tmp/dir"
not_regular="not a regular file;"
for spec in "/dev/zero:a character device" "$tmp/fifo:a FIFO" "$tmp/dir:a directory"; do
  file="${spec%%:*}" what="${spec#*:}"
  timeout 20 "$kiln" simulate "$file" >/dev/null 2>"$tmp/err.txt"; rc=$?
  [[ $rc == 1 && "$(cat "$tmp/err.txt")" == "kiln simulate: cannot read '$file': $what, $not_regular a scenario file must be a regular file" ]] \
    && ok "scenario $file is refused" || bad "scenario $file: exit $rc, $(head -c 300 "$tmp/err.txt")"
  printf '{"horizon": "1h", "workloads": [{"kind": "trace", "file": "%s"}], "policies": [{}]}' "$file" >"$tmp/jobs.json"
  timeout 20 "$kiln" simulate "$tmp/jobs.json" >/dev/null 2>"$tmp/err.txt"; rc=$?
  [[ $rc == 1 && "$(cat "$tmp/err.txt")" == "kiln simulate: $tmp/jobs.json: scenario.workloads[0].file: cannot read '$file': $what, $not_regular a trace file must be a regular file" ]] \
    && ok "job trace $file is refused" || bad "job trace $file: exit $rc, $(head -c 300 "$tmp/err.txt")"
  printf '{"models": {"instance_types": {"ml.m5.xlarge": {"spot": {"trace": "%s"}}}}, "workloads": [{"kind": "hpo", "job": {"work": "1m"}}], "policies": [{}]}' "$file" >"$tmp/spot.json"
  timeout 20 "$kiln" simulate "$tmp/spot.json" >/dev/null 2>"$tmp/err.txt"; rc=$?
  [[ $rc == 1 ]] && grep -qF "spot.trace: cannot read '$file': $what, $not_regular a trace file must be a regular file" "$tmp/err.txt" \
    && ok "spot trace $file is refused" || bad "spot trace $file: exit $rc, $(head -c 300 "$tmp/err.txt")"
done
: >"$tmp/big.json"
truncate -s $((16 * 1024 * 1024 + 1)) "$tmp/big.json"
timeout 20 "$kiln" simulate "$tmp/big.json" >/dev/null 2>"$tmp/err.txt"; rc=$?
[[ $rc == 1 ]] && grep -qF "cannot read '$tmp/big.json': 16777217 bytes; a scenario file may hold at most 16 MiB (16777216 bytes)" "$tmp/err.txt" \
  && ok "a scenario over 16 MiB is refused" || bad "big scenario: exit $rc, $(head -c 300 "$tmp/err.txt")"
printf '{"workloads": [], "policies": []}' >"$tmp/empty.json"
"$kiln" simulate "$tmp/empty.json" >/dev/null 2>"$tmp/err.txt"; [[ $? == 1 ]] && grep -q "scenario.workloads" "$tmp/err.txt" \
  && ok "invalid scenario exits 1 naming the member" || bad "invalid scenario: $(cat "$tmp/err.txt")"
# The report: checked before the run, replaced only by a whole one.
"$kiln" simulate "$scenario" --report "$tmp/no/such/dir/r.html" >"$tmp/out.txt" 2>"$tmp/err.txt"
[[ $? == 1 && ! -s "$tmp/out.txt" ]] && grep -q "cannot write the report: $tmp/no/such/dir" "$tmp/err.txt" \
  && ok "a report into a missing directory fails before the run" || bad "missing report dir: $(cat "$tmp/err.txt")"
"$kiln" simulate "$scenario" --report "$tmp" >"$tmp/out.txt" 2>"$tmp/err.txt"
[[ $? == 1 && ! -s "$tmp/out.txt" ]] && grep -q "is a directory" "$tmp/err.txt" \
  && ok "a report onto a directory fails before the run" || bad "report onto a dir: $(cat "$tmp/err.txt")"
echo "an old report" >"$tmp/old.html"
# A write that fails midway (files limited to 8 KiB, and SIGXFSZ ignored so
# that write() reports EFBIG, as a full disk reports ENOSPC).
(ulimit -f 8; trap '' XFSZ; "$kiln" simulate "$scenario" --report "$tmp/old.html" >"$tmp/out.txt" 2>"$tmp/err.txt")
[[ $? == 1 ]] && grep -q "cannot write the report: $tmp/old.html" "$tmp/err.txt" \
  && [[ "$(cat "$tmp/old.html")" == "an old report" ]] && [[ -z "$(ls "$tmp" | grep '\.tmp-')" ]] \
  && ok "a failed report write keeps the old report and leaves no temporary file" \
  || bad "failed report write: $(cat "$tmp/err.txt"); $(head -c 100 "$tmp/old.html"); $(ls "$tmp")"
"$kiln" simulate "$scenario" --report "$tmp/old.html" >/dev/null 2>&1 && cmp -s "$tmp/old.html" "$tmp/a.html" \
  && [[ -z "$(ls "$tmp" | grep '\.tmp-')" ]] && ok "a report replaces an old one" || bad "report over an old one"
"$kiln" simulate "$scenario" --report "$tmp/full.html" >/dev/full 2>"$tmp/err.txt"
[[ $? == 1 ]] && grep -q "cannot write the output" "$tmp/err.txt" && cmp -s "$tmp/full.html" "$tmp/a.html" \
  && ok "output to a full disk exits 1; the report is still written" || bad "stdout full: $(cat "$tmp/err.txt")"
exit $fail
