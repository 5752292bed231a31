#!/usr/bin/env bash
# `kiln simulate` end to end: formats, the HTML report, determinism of the
# output for a seed, --seed, and exit status on errors.
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
grep -q "^UniformProgress(ckpt 600s) " "$tmp/table.txt" && ok "table has a row per policy" || bad "table rows: $(cat "$tmp/table.txt")"
grep -q "^Best by cost at equal or better latency" "$tmp/table.txt" && ok "table names the best policy" || bad "best line"
[[ ! -s "$tmp/err.txt" ]] && ok "no progress bar when stderr is not a terminal" || bad "stderr: $(cat "$tmp/err.txt")"

"$kiln" simulate "$scenario" --format json --report "$tmp/a.html" >"$tmp/a.json" 2>/dev/null
"$kiln" simulate "$scenario" --format=json --report="$tmp/b.html" >"$tmp/b.json" 2>/dev/null
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert len(d['policies'])==4 and d['best']" "$tmp/a.json" \
  && ok "json parses" || bad "json: $(head -c 300 "$tmp/a.json")"
cmp -s "$tmp/a.json" "$tmp/b.json" && cmp -s "$tmp/a.html" "$tmp/b.html" && ok "same seed, same bytes" || bad "outputs differ between runs"
grep -q "<svg " "$tmp/a.html" && ! grep -q "<script" "$tmp/a.html" && ok "report is self-contained HTML with SVG" || bad "report"

"$kiln" simulate "$scenario" --format csv --seed 8 >"$tmp/c8.csv" 2>/dev/null
"$kiln" simulate "$scenario" --format csv >"$tmp/c7.csv" 2>/dev/null
[[ "$(wc -l <"$tmp/c8.csv")" == 5 ]] && ! cmp -s "$tmp/c7.csv" "$tmp/c8.csv" && ok "csv; another seed, other numbers" || bad "csv/seed"

"$kiln" simulate "$scenario" --format xml >/dev/null 2>&1; [[ $? == 2 ]] && ok "bad format exits 2" || bad "bad format"
"$kiln" simulate >/dev/null 2>&1; [[ $? == 2 ]] && ok "no scenario exits 2" || bad "no scenario"
"$kiln" simulate "$tmp/missing.json" >/dev/null 2>"$tmp/err.txt"; [[ $? == 1 ]] && grep -q "cannot read" "$tmp/err.txt" \
  && ok "unreadable scenario exits 1" || bad "unreadable scenario: $(cat "$tmp/err.txt")"
printf '{"workloads": [], "policies": []}' >"$tmp/empty.json"
"$kiln" simulate "$tmp/empty.json" >/dev/null 2>"$tmp/err.txt"; [[ $? == 1 ]] && grep -q "scenario.workloads" "$tmp/err.txt" \
  && ok "invalid scenario exits 1 naming the member" || bad "invalid scenario: $(cat "$tmp/err.txt")"
exit $fail
