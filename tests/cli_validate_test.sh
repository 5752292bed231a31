#!/usr/bin/env bash
# `kiln validate`: output and exit status for valid, invalid, non-JSON and
# unreadable files. Usage: cli_validate_test.sh KILN CORPUS_DIR
set -u
kiln="$1"
corpus="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail=0
check() {  # check NAME EXPECTED_STATUS EXPECTED_OUTPUT_REGEX FILES...
  local name="$1" want_status="$2" want_output="$3"
  shift 3
  local out status
  out="$(timeout 20 "$kiln" validate "$@" 2>&1)"
  status=$?
  if [[ "$status" != "$want_status" ]] || ! grep -Eq -- "$want_output" <<<"$out"; then
    echo "FAIL $name: status $status (want $want_status), output:"
    echo "$out"
    fail=1
  else
    echo "ok   $name"
  fi
}
check "corpus is valid" 0 "spot-checkpoint.json: valid" "$corpus"/*.json
printf '{"TrainingJobName":"a_b","RoleArn":"arn:aws:iam::123456789012:role/R","OutputDataConfig":{"S3OutputPath":"s3://b/o"},"AlgorithmSpecification":{"TrainingImage":"i","TrainingInputMode":"File"},"ResourceConfig":{"InstanceType":"ml.m5.large","InstanceCount":1}}' >"$tmp/bad.json"
check "invalid request" 2 "bad.json: 1 validation error detected: Value 'a_b' at 'trainingJobName'" "$tmp/bad.json"
printf '{"TrainingJobName": 5}' >"$tmp/type.json"
check "wrong type" 2 "Invalid type for parameter TrainingJobName" "$tmp/type.json"
printf '{"TrainingJobName": ' >"$tmp/broken.json"
check "not JSON" 1 "broken.json: not JSON: Invalid JSON: line 1" "$tmp/broken.json"
check "unreadable" 1 "missing.json: cannot read the file: No such file or directory" "$tmp/missing.json"
# Only regular files of at most 8 MiB are read: a device, a FIFO (no writer:
# the open must not wait), a directory or a larger file is refused at once.
# (timeout: such reads used to never end.)
mkfifo "$tmp/fifo.json"
mkdir "$tmp/dir.json"
: >"$tmp/big.json"
truncate -s $((8 * 1024 * 1024 + 1)) "$tmp/big.json"
not_regular="not a regular file; a request file must be a regular file"
check "/dev/zero" 1 "^/dev/zero: cannot read the file: a character device, $not_regular\$" /dev/zero
check "a FIFO" 1 "fifo.json: cannot read the file: a FIFO, $not_regular\$" "$tmp/fifo.json"
check "a directory" 1 "dir.json: cannot read the file: a directory, $not_regular\$" "$tmp/dir.json"
check "over 8 MiB" 1 \
  "big.json: cannot read the file: 8388609 bytes; a request file may hold at most 8 MiB \(8388608 bytes\)\$" \
  "$tmp/big.json"
check "refused files do not stop the others" 1 "local-file.json: valid" /dev/zero "$corpus/local-file.json"
# A request with an error per element lists the first 100 and counts the
# rest, on one line of bounded size.
python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
r["Tags"] = [{"Key": "k", "Value": "v"}] * 20000
json.dump(r, open(sys.argv[2], "w"))' "$corpus/local-file.json" "$tmp/tags.json"
check "many errors are counted" 2 "tags.json: 20000 validation errors detected: .*; and 19900 more\$" "$tmp/tags.json"
out="$(timeout 20 "$kiln" validate "$tmp/tags.json" 2>&1)"
if (( ${#out} > 100000 )); then
  echo "FAIL many errors: ${#out} bytes of output"
  fail=1
else
  echo "ok   many errors: ${#out} bytes of output"
fi
# "." and ".." pass the model's ChannelName pattern but name no channel
# directory.
for name in . ..; do
  python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
r["InputDataConfig"][0]["ChannelName"] = sys.argv[3]
json.dump(r, open(sys.argv[2], "w"))' "$corpus/local-file.json" "$tmp/dots.json" "$name"
  check "ChannelName '$name'" 2 \
    "dots.json: 1 validation error detected: Value '\\$name' at 'inputDataConfig.1.member.channelName' failed to satisfy constraint: ChannelName must not be '\.' or '\.\.'" \
    "$tmp/dots.json"
done
check "valid and invalid together" 2 "bad.json: 1 validation error" "$corpus/local-file.json" "$tmp/bad.json"
# A file name is input: shown escaped, it cannot add a line ("x: valid") to the output.
out="$("$kiln" validate "$tmp/no"$'\n'"x: valid" 2>&1)"
status=$?
want="$tmp/no\nx: valid: cannot read the file: No such file or directory"
if [[ "$status" != 1 || "$out" != "$want" ]]; then
  echo "FAIL a file name with a line break: status $status (want 1), output:"
  echo "$out"
  fail=1
else
  echo "ok   a file name with a line break"
fi
# stdout that cannot be written (a full disk): exit 1 and say so on stderr.
if [[ -w /dev/full ]]; then
  err="$("$kiln" validate "$corpus/local-file.json" 2>&1 >/dev/full)"
  status=$?
  if [[ "$status" != 1 ]] || ! grep -q "kiln validate: cannot write the output" <<<"$err"; then
    echo "FAIL stdout full: status $status (want 1), stderr:"
    echo "$err"
    fail=1
  else
    echo "ok   stdout full"
  fi
fi
exit $fail
