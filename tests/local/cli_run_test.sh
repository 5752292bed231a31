#!/usr/bin/env bash
# `kiln run` on the local backend (real processes, file:// data and output):
# its stdout, stderr and exit status for a job that completes, one that fails,
# both in one run, and stdout that cannot be written; the state directory's
# journal (a name it holds is refused, `kiln list` and `kiln describe` read it,
# a second writer is refused, a run after a crash carries the job on); `kiln
# logs` of a job's log streams, also following a running job.
# Usage: cli_run_test.sh KILN
set -u
kiln="$1"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"  # run as root, the containers run as nobody, who must reach it
fail=0

mkdir -p "$tmp/data" "$tmp/ok-image" "$tmp/bad-image"
printf '1,2\n3,4\n' >"$tmp/data/part-0.csv"
cat >"$tmp/ok-image/train" <<'EOF'
#!/bin/sh
echo "rows: $(cat "$SM_CHANNEL_TRAIN"/part-0.csv | wc -l)"
echo trained >"$SM_MODEL_DIR/model.txt"
EOF
cat >"$tmp/bad-image/train" <<'EOF'
#!/bin/sh
echo "loss went to NaN" >"$SAGEMAKER_BASE_DIR/output/failure"
exit 3
EOF
chmod +x "$tmp/ok-image/train" "$tmp/bad-image/train"

job() {  # job NAME IMAGE_DIR: writes $tmp/NAME.json
  cat >"$tmp/$1.json" <<EOF
{"TrainingJobName": "$1", "RoleArn": "arn:aws:iam::000000000000:role/test",
 "AlgorithmSpecification": {"TrainingImage": "$2", "TrainingInputMode": "File"},
 "InputDataConfig": [{"ChannelName": "train", "DataSource": {"S3DataSource":
   {"S3DataType": "S3Prefix", "S3Uri": "file://$tmp/data/"}}}],
 "OutputDataConfig": {"S3OutputPath": "file://$tmp/out"},
 "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1},
 "StoppingCondition": {"MaxRuntimeInSeconds": 60}}
EOF
}
job good "$tmp/ok-image"
job bad "$tmp/bad-image"

# check NAME WANT_STATUS STDOUT_REGEX STDERR_REGEX -- ARGS...: runs kiln run
# with ARGS (stdout to $tmp/stdout) on a new state directory and checks its
# status and both streams.
check() {
  local name="$1" want_status="$2" want_out="$3" want_err="$4"
  shift 5
  local status
  rm -rf "$tmp/state"
  "$kiln" run --state-dir "$tmp/state" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  status=$?
  if [[ "$status" != "$want_status" ]] || ! grep -Eq -- "$want_out" "$tmp/stdout" ||
     ! grep -Eq -- "$want_err" "$tmp/stderr"; then
    echo "FAIL $name: status $status (want $want_status); stdout:"
    cat "$tmp/stdout"
    echo "stderr:"
    cat "$tmp/stderr"
    fail=1
  else
    echo "ok   $name"
  fi
}

check "a job that completes" 0 '"TrainingJobStatus":"Completed"' 'rows: 2' -- "$tmp/good.json"
# Describe as the service shows it: the Enable* flags the request left out are
# false, and times have at most three fraction digits.
for want in '"EnableNetworkIsolation":false' '"EnableInterContainerTrafficEncryption":false' \
            '"EnableManagedSpotTraining":false'; do
  if ! grep -qF -- "$want" "$tmp/stdout"; then
    echo "FAIL describe lacks $want:"
    cat "$tmp/stdout"
    fail=1
  fi
done
if grep -Eq '"(CreationTime|LastModifiedTime|StartTime|EndTime|TrainingStartTime|TrainingEndTime)":[0-9]+\.[0-9]{4}' \
     "$tmp/stdout"; then
  echo "FAIL describe shows a time finer than a millisecond:"
  cat "$tmp/stdout"
  fail=1
fi
if ! tar -xzOf "$tmp/out/good/output/model.tar.gz" model.txt 2>/dev/null | grep -q trained; then
  echo "FAIL the model was not uploaded to file://$tmp/out/good/output/model.tar.gz"
  fail=1
fi
# The state directory's journal keeps the job: `kiln describe` shows what
# `kiln run` printed, byte for byte; `kiln list` lists it and filters; a
# second job of that name is refused as the service refuses it.
cp "$tmp/stdout" "$tmp/good.describe"
"$kiln" describe --state-dir "$tmp/state" good >"$tmp/described" 2>"$tmp/stderr"
if ! cmp -s "$tmp/described" "$tmp/good.describe"; then
  echo "FAIL kiln describe differs from what kiln run printed:"
  diff "$tmp/good.describe" "$tmp/described"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   kiln describe shows the job as kiln run did"
fi
if ! "$kiln" list --state-dir "$tmp/state" | grep -Eq $'^good\tCompleted\tCompleted\t20[0-9-]+T' ||
   [[ -n "$("$kiln" list --state-dir "$tmp/state" --status Failed)" ]] ||
   [[ -n "$("$kiln" list --state-dir "$tmp/state" --name-contains nope)" ]] ||
   [[ "$("$kiln" list --state-dir "$tmp/state" --name-contains oo | cut -f1)" != good ]]; then
  echo "FAIL kiln list:"
  "$kiln" list --state-dir "$tmp/state"
  fail=1
else
  echo "ok   kiln list lists and filters"
fi
"$kiln" describe --state-dir "$tmp/state" nope >/dev/null 2>"$tmp/stderr"
status=$?
if [[ "$status" != 1 ]] || ! grep -q "ResourceNotFound\|ValidationException" "$tmp/stderr"; then
  echo "FAIL kiln describe of an unknown job: status $status, stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   kiln describe of an unknown job fails"
fi
"$kiln" run --state-dir "$tmp/state" "$tmp/good.json" >"$tmp/stdout" 2>"$tmp/stderr"
status=$?
if [[ "$status" != 2 ]] || ! grep -q "^\[good\] not accepted: ResourceInUse: " "$tmp/stderr" ||
   grep -q "rows:" "$tmp/stderr"; then
  echo "FAIL a name the journal holds: status $status (want 2), stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   a name the journal holds is refused"
fi

# --file-root confines file://: the data folder outside every root is not
# accepted (nothing runs; the engine's refusal shows the service's code, and
# exit 2); with it inside one, the job runs.
mkdir -p "$tmp/elsewhere"
rm -rf "$tmp/state"
"$kiln" run --state-dir "$tmp/state" --file-root "$tmp/elsewhere" "$tmp/good.json" \
  >"$tmp/stdout" 2>"$tmp/stderr"
status=$?
want="[good] not accepted: AccessDeniedException: channel 'train': file object store: 'file://$tmp/data/' is outside the allowed roots ($tmp/elsewhere)"
if [[ "$status" != 2 ]] || ! grep -qxF -- "$want" "$tmp/stderr" || grep -q "rows:" "$tmp/stderr"; then
  echo "FAIL a source outside --file-root: status $status (want 2), stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   a source outside --file-root is not accepted"
fi
check "sources and outputs inside --file-root" 0 '"TrainingJobStatus":"Completed"' 'rows: 2' \
  -- --file-root "$tmp/data" --file-root "$tmp/out" "$tmp/good.json"
# The containers' user: as root, nobody unless --user names another.
mkdir -p "$tmp/id-image"
cat >"$tmp/id-image/train" <<'EOF'
#!/bin/sh
echo "uid: $(id -u) gid: $(id -g)"
EOF
chmod +x "$tmp/id-image/train"
job whoami "$tmp/id-image"
if [[ "$(id -u)" == 0 ]]; then
  check "as root, containers run as nobody" 0 '"TrainingJobStatus":"Completed"' \
    'uid: 65534 gid: 65534' -- "$tmp/whoami.json"
  check "--user names the containers' user" 0 '"TrainingJobStatus":"Completed"' \
    'uid: 4321 gid: 4322' -- --user 4321:4322 "$tmp/whoami.json"
else
  check "without root, containers run as its user" 0 '"TrainingJobStatus":"Completed"' \
    "uid: $(id -u) gid: $(id -g)" -- "$tmp/whoami.json"
fi
rm -rf "$tmp/state"
"$kiln" run --state-dir "$tmp/state" --user nobody "$tmp/whoami.json" >/dev/null 2>"$tmp/stderr"
status=$?
if [[ "$status" != 1 ]] ||
   [[ "$(head -1 "$tmp/stderr")" != "kiln run: --user takes UID or UID:GID, numbers, not 'nobody'" ]]; then
  echo "FAIL a bad --user: status $status (want 1), stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   a bad --user is refused"
fi
# A request the service refuses: its ValidationException, exit 2; the next
# job still runs.
sed 's/"InstanceCount": 1/"InstanceCount": 0/; s/"good"/"zero"/' "$tmp/good.json" >"$tmp/zero.json"
check "a refused request" 2 '"TrainingJobName":"good"' \
  "^\[zero\] not accepted: ValidationException: .*instanceCount" -- "$tmp/zero.json" "$tmp/good.json"
check "a job that fails" 1 '"FailureReason":"AlgorithmError: loss went to NaN' \
  'Failed' -- "$tmp/bad.json"
# Both in one run: a line per job, in submission order, and exit 1.
rm -rf "$tmp/state"
check "one of two fails" 1 '"TrainingJobName":"bad"' '' -- "$tmp/good.json" "$tmp/bad.json"
if [[ "$(grep -o '"TrainingJobName":"[a-z]*"' "$tmp/stdout" | tr '\n' ' ')" != \
      '"TrainingJobName":"good" "TrainingJobName":"bad" ' ]]; then
  echo "FAIL one of two fails: not one line per job in order:"
  cat "$tmp/stdout"
  fail=1
fi

# kiln logs: a job's log streams from the state directory. With two hosts,
# each line comes after its stream's name, the streams in order; a line of
# 150,000 bytes in pieces of 64 KiB; a last line without its newline is shown
# once the job has ended; --host shows one host's.
mkdir -p "$tmp/hosts-image"
cat >"$tmp/hosts-image/train" <<'EOF'
#!/bin/sh
echo "hello from $SM_CURRENT_HOST"
head -c 150000 /dev/zero | tr '\0' x
echo
printf 'last words of %s' "$SM_CURRENT_HOST"
EOF
chmod +x "$tmp/hosts-image/train"
job hosts "$tmp/hosts-image"
sed -i 's/"InstanceCount": 1/"InstanceCount": 2/' "$tmp/hosts.json"
rm -rf "$tmp/state"
if ! "$kiln" run --state-dir "$tmp/state" "$tmp/hosts.json" >/dev/null 2>"$tmp/stderr"; then
  echo "FAIL the job with two hosts did not complete:"
  cat "$tmp/stderr"
  fail=1
fi
"$kiln" logs --state-dir "$tmp/state" hosts >"$tmp/logs" 2>"$tmp/stderr"
status=$?
want=$'algo-1: hello from algo-1\nalgo-1: last words of algo-1\nalgo-2: hello from algo-2\nalgo-2: last words of algo-2'
got="$(grep -Ev ' (\[kiln\] |x)' "$tmp/logs" | sed -E 's#^hosts/(algo-[12])-[0-9]+ #\1: #')"
if [[ "$status" != 0 || "$got" != "$want" || -s "$tmp/stderr" ]] ||
   grep -Evq '^hosts/algo-[12]-[0-9]+ ' "$tmp/logs"; then
  echo "FAIL kiln logs of a job with two hosts: status $status; stdout:"
  cut -c1-200 "$tmp/logs"
  echo "stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   kiln logs shows both hosts' streams, each line after its stream's name"
fi
"$kiln" logs --state-dir "$tmp/state" --host algo-2 hosts >"$tmp/logs" 2>"$tmp/stderr"
status=$?
if [[ "$status" != 0 || "$(grep -Ev '^(\[kiln\] |x)' "$tmp/logs")" != \
      $'hello from algo-2\nlast words of algo-2' ||
      "$(grep '^x' "$tmp/logs" | awk '{ printf "%d ", length($0) }')" != "65536 65536 18928 " ]]; then
  echo "FAIL kiln logs --host algo-2: status $status; stdout:"
  cut -c1-200 "$tmp/logs"
  echo "stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   kiln logs --host shows that host's lines only"
fi
"$kiln" logs --state-dir "$tmp/state" --host algo-3 hosts >"$tmp/logs" 2>"$tmp/stderr"
status=$?
if [[ "$status" != 1 || -s "$tmp/logs" ||
      "$(cat "$tmp/stderr")" != "kiln logs: job 'hosts' has no host 'algo-3'; its hosts: algo-1, algo-2" ]]; then
  echo "FAIL kiln logs --host algo-3: status $status (want 1), stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   kiln logs of a host the job does not have names the hosts it has"
fi
"$kiln" logs --state-dir "$tmp/state" nope >"$tmp/logs" 2>"$tmp/stderr"
status=$?
if [[ "$status" != 1 || -s "$tmp/logs" ||
      "$(cat "$tmp/stderr")" != "kiln logs: no job 'nope' in the journal of $tmp/state" ]]; then
  echo "FAIL kiln logs of an unknown job: status $status (want 1), stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   kiln logs of an unknown job names it and the state directory"
fi
# --follow on a running job: lines as they come (each written in two
# pieces), every one once, and the end once the job has ended. Ctrl-C ends a
# follower quietly.
mkdir -p "$tmp/ticks-image"
cat >"$tmp/ticks-image/train" <<'EOF'
#!/bin/sh
i=1
while [ $i -le 15 ]; do
  printf 'tick %s of %s' $i "$SM_CURRENT_HOST"; sleep 0.1; printf ' done\n'
  i=$((i + 1)); sleep 0.1
done
EOF
chmod +x "$tmp/ticks-image/train"
job ticks "$tmp/ticks-image"
sed -i 's/"InstanceCount": 1/"InstanceCount": 2/' "$tmp/ticks.json"
"$kiln" run --state-dir "$tmp/state" "$tmp/ticks.json" >/dev/null 2>"$tmp/stderr" &
kiln_pid=$!
for _ in $(seq 100); do
  "$kiln" list --state-dir "$tmp/state" | grep -q '^ticks' && break
  sleep 0.1
done
# (Each line with the time it came.)
{
  timeout 60 "$kiln" logs --follow --state-dir "$tmp/state" ticks 2>"$tmp/follow.err"
  echo $? >"$tmp/follow.status"
} | while IFS= read -r line; do printf '%s %s\n' "$(date +%s%N)" "$line"; done >"$tmp/follow" &
following=$!
"$kiln" logs --follow --state-dir "$tmp/state" ticks >"$tmp/follow2" 2>"$tmp/follow2.err" &
follower=$!
for _ in $(seq 50); do
  [[ -s "$tmp/follow2" ]] && break
  sleep 0.1
done
kill -INT "$follower" 2>/dev/null
wait "$follower"
follower_status=$?
wait "$following"
status="$(cat "$tmp/follow.status")"
job_status="$("$kiln" list --state-dir "$tmp/state" --name-contains ticks | cut -f2)"
wait "$kiln_pid"
first="$(head -1 "$tmp/follow" | cut -d' ' -f1)" last="$(tail -1 "$tmp/follow" | cut -d' ' -f1)"
cut -d' ' -f2- "$tmp/follow" >"$tmp/followed"
ticks="$(grep -Ec '^ticks/algo-[12]-[0-9]+ tick ([1-9]|1[0-5]) of algo-[12] done$' "$tmp/followed")"
if [[ "$status" != 0 || "$job_status" != Completed || "$ticks" != 30 || -s "$tmp/follow.err" ]] ||
   [[ -n "$(grep -v ' \[kiln\] ' "$tmp/followed" | sed 's/^[^ ]* //' | sort | uniq -d)" ]] ||
   (( last - first < 1000000000 )); then
  echo "FAIL kiln logs --follow: status $status, job $job_status, $ticks ticks (want 30)," \
       "$(( (last - first) / 1000000 )) ms from the first line to the last; stdout:"
  cat "$tmp/follow"
  echo "stderr:"
  cat "$tmp/follow.err"
  fail=1
elif ! "$kiln" logs --state-dir "$tmp/state" ticks | sort | cmp -s - <(sort "$tmp/followed"); then
  echo "FAIL kiln logs --follow showed other lines than kiln logs does afterwards:"
  diff <("$kiln" logs --state-dir "$tmp/state" ticks | sort) <(sort "$tmp/followed")
  fail=1
else
  echo "ok   kiln logs --follow shows each line once as it comes, and ends with the job"
fi
if [[ "$follower_status" != 130 || -s "$tmp/follow2.err" ]]; then
  echo "FAIL kiln logs --follow after Ctrl-C: status $follower_status (want 130), stderr:"
  cat "$tmp/follow2.err"
  fail=1
else
  echo "ok   Ctrl-C ends kiln logs --follow quietly"
fi

# Arguments are input: shown escaped, none can add a line to a message.
"$kiln" run --runtime $'x\nkiln run: forged' "$tmp/good.json" >/dev/null 2>"$tmp/stderr"
status=$?
want="kiln run: --runtime must be process or bwrap, not 'x\nkiln run: forged'"
if [[ "$status" != 1 || "$(head -1 "$tmp/stderr")" != "$want" ]] ||
   grep -q "^kiln run: forged" "$tmp/stderr"; then
  echo "FAIL a bad --runtime: status $status (want 1), stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   a bad --runtime is shown escaped"
fi
"$kiln" run --state-dir "$tmp/state" "$tmp/no"$'\r'"such.json" >/dev/null 2>"$tmp/stderr"
status=$?
want="kiln run: $tmp/no\rsuch.json: cannot read the file: No such file or directory"
if [[ "$status" != 1 || "$(cat "$tmp/stderr")" != "$want" ]]; then
  echo "FAIL a job file name with a line break: status $status (want 1), stderr:"
  cat -A "$tmp/stderr"
  fail=1
else
  echo "ok   a job file name is shown escaped"
fi
# A job file must be a regular file: a device, a FIFO or a directory is
# refused at once, nothing run (timeout: the reads used to never end).
mkfifo "$tmp/fifo.json"
mkdir "$tmp/dir.json"
for spec in "/dev/zero:a character device" "$tmp/fifo.json:a FIFO" "$tmp/dir.json:a directory"; do
  file="${spec%%:*}" what="${spec#*:}"
  timeout 20 "$kiln" run --state-dir "$tmp/state" "$file" >/dev/null 2>"$tmp/stderr"
  status=$?
  want="kiln run: $file: cannot read the file: $what, not a regular file; a request file must be a regular file"
  if [[ "$status" != 1 || "$(cat "$tmp/stderr")" != "$want" ]]; then
    echo "FAIL job file $file: status $status (want 1), stderr:"
    head -c 500 "$tmp/stderr"
    fail=1
  else
    echo "ok   job file $file is refused"
  fi
done

# stdout that cannot be written (a full disk): the jobs still run, exit 1,
# and stderr says why.
if [[ -w /dev/full ]]; then
  rm -rf "$tmp/state"
  "$kiln" run --state-dir "$tmp/state" "$tmp/good.json" >/dev/full 2>"$tmp/stderr"
  status=$?
  if [[ "$status" != 1 ]] || ! grep -q "kiln run: cannot write the output" "$tmp/stderr" ||
     ! grep -q "rows: 2" "$tmp/stderr"; then
    echo "FAIL stdout full: status $status (want 1), stderr:"
    cat "$tmp/stderr"
    fail=1
  else
    echo "ok   stdout full"
  fi
fi
# Ctrl-C (SIGINT) while the first of two jobs trains: that job is stopped
# cleanly (Stopped, its model uploaded), the second is never submitted, and
# kiln run exits with 130.
cat >"$tmp/ok-image/train" <<'EOF'
#!/bin/sh
trap 'echo trained >"$SM_MODEL_DIR/model.txt"; exit 0' TERM
echo ready >"$SM_MODEL_DIR/ready"
while :; do sleep 0.1; done
EOF
rm -rf "$tmp/state"
"$kiln" run --state-dir "$tmp/state" --grace 10 "$tmp/good.json" "$tmp/bad.json" \
  >"$tmp/stdout" 2>"$tmp/stderr" &
kiln_pid=$!
for _ in $(seq 100); do
  ls "$tmp"/state/instances/*/algo-1/ml/model/ready >/dev/null 2>&1 && break
  sleep 0.1
done
# While it runs: a second kiln run on the directory is refused, naming it;
# kiln list reads the journal all the same.
"$kiln" run --state-dir "$tmp/state" "$tmp/bad.json" >/dev/null 2>"$tmp/stderr2"
status=$?
if [[ "$status" != 1 ]] || ! grep -q "in use by process $kiln_pid" "$tmp/stderr2"; then
  echo "FAIL a second kiln run on the directory: status $status (want 1), stderr:"
  cat "$tmp/stderr2"
  fail=1
else
  echo "ok   a second kiln run on the directory is refused, naming the first"
fi
if ! "$kiln" list --state-dir "$tmp/state" | grep -Eq $'^good\tInProgress\tTraining'; then
  echo "FAIL kiln list while kiln run runs:"
  "$kiln" list --state-dir "$tmp/state"
  fail=1
else
  echo "ok   kiln list reads the journal while kiln run runs"
fi
kill -INT "$kiln_pid"
wait "$kiln_pid"
status=$?
if [[ "$status" != 130 ]] || ! grep -q '"TrainingJobName":"good"' "$tmp/stdout" ||
   ! grep -q '"TrainingJobStatus":"Stopped"' "$tmp/stdout" ||
   grep -q '"TrainingJobName":"bad"' "$tmp/stdout" ||
   ! grep -q 'stopping (Ctrl-C): OK' "$tmp/stderr"; then
  echo "FAIL Ctrl-C: status $status (want 130); stdout:"
  cat "$tmp/stdout"
  echo "stderr:"
  cat "$tmp/stderr"
  fail=1
else
  echo "ok   Ctrl-C stops the running job and submits no more"
fi

# kiln run killed outright (a crash) with --reattach-lease 0: no process of
# its job survives it, not even one the entrypoint started in the background,
# nor one that left its process group (setsid).
cat >"$tmp/ok-image/train" <<'EOF'
#!/bin/sh
sleep 300 &
echo $! >"$SM_MODEL_DIR/child.pid.tmp"
setsid sleep 300 &
echo $! >>"$SM_MODEL_DIR/child.pid.tmp"
mv "$SM_MODEL_DIR/child.pid.tmp" "$SM_MODEL_DIR/child.pid"
wait
EOF
rm -rf "$tmp/state"
# (With a RetryStrategy: the run after the crash starts it again.)
sed 's/"StoppingCondition"/"RetryStrategy": {"MaximumRetryAttempts": 1}, "StoppingCondition"/' \
  "$tmp/good.json" >"$tmp/retried.json"
"$kiln" run --state-dir "$tmp/state" --reattach-lease 0 "$tmp/retried.json" >/dev/null \
  2>"$tmp/stderr" &
kiln_pid=$!
child_pids=""
for _ in $(seq 100); do
  child_pids="$(cat "$tmp"/state/instances/*/algo-1/ml/model/child.pid 2>/dev/null)"
  [[ -n "$child_pids" ]] && break
  sleep 0.1
done
kill -9 "$kiln_pid"
wait "$kiln_pid" 2>/dev/null
alive() { [[ -e /proc/$1 ]] && ! grep -q '^[^)]*) Z' "/proc/$1/stat" 2>/dev/null; }
any_alive() {
  local p
  for p in $child_pids; do alive "$p" && return 0; done
  return 1
}
for _ in $(seq 50); do
  any_alive || break
  sleep 0.1
done
if [[ -z "$child_pids" ]]; then
  echo "FAIL killed kiln run: the job never started; stderr:"
  cat "$tmp/stderr"
  fail=1
elif any_alive; then
  for p in $child_pids; do
    if alive "$p"; then
      echo "FAIL killed kiln run: the job's background process $p survived it"
      kill -9 "$p"
    fi
  done
  fail=1
else
  echo "ok   killed kiln run leaves no process of its job"
fi

# The next kiln run on that state directory deletes the cluster the killed
# one left (its lock died with it), and, given no job files, carries on with
# the job the killed one left unfinished: its instances were lost with it,
# and its RetryStrategy starts it again, to completion.
left="$(ls "$tmp/state/instances")"
cat >"$tmp/ok-image/train" <<'EOF'
#!/bin/sh
echo trained >"$SM_MODEL_DIR/model.txt"
EOF
if [[ -z "$left" ]]; then
  echo "FAIL killed kiln run left no cluster directory to look at"
  fail=1
elif ! "$kiln" run --state-dir "$tmp/state" >"$tmp/stdout" 2>"$tmp/stderr" ||
     ! grep -q '"TrainingJobName":"good".*"TrainingJobStatus":"Completed"' "$tmp/stdout" ||
     ! grep -q "The controller restarted and the instances were lost; infrastructure retry 1 of 1" \
       "$tmp/stdout" || ! grep -q "\[good\] resumed" "$tmp/stderr"; then
  echo "FAIL kiln run after a crash:"
  cat "$tmp/stdout" "$tmp/stderr"
  fail=1
elif [[ -n "$(ls "$tmp/state/instances")" ]]; then
  echo "FAIL the next kiln run kept what the killed one left: $(ls "$tmp/state/instances")"
  fail=1
else
  echo "ok   the next kiln run deletes what the killed one left"
fi

# kiln run killed outright with its reattach lease (the default): the job's
# container runs on, and the next kiln run takes it back. The job completes
# in its first attempt, and its log stream holds every line once.
cat >"$tmp/ok-image/train" <<'EOF'
#!/bin/sh
i=1
while [ $i -le 30 ]; do echo "step $i"; sleep 0.1; i=$((i+1)); done
echo trained >"$SM_MODEL_DIR/model.txt"
EOF
rm -rf "$tmp/state"
"$kiln" run --state-dir "$tmp/state" "$tmp/good.json" >/dev/null 2>"$tmp/stderr" &
kiln_pid=$!
for _ in $(seq 100); do
  grep -q "step 5$" "$tmp/stderr" && break
  sleep 0.1
done
kill -9 "$kiln_pid"
wait "$kiln_pid" 2>/dev/null
sleep 0.5
"$kiln" run --state-dir "$tmp/state" >"$tmp/stdout" 2>"$tmp/stderr"
status=$?
streams=("$tmp"/state/logs/good/algo-1-*)
missing=""
for i in $(seq 30); do
  [[ "$(cat "${streams[@]}" | grep -c "^step $i$")" == 1 ]] || missing="$missing $i"
done
if [[ "$status" != 0 ]] ||
   ! grep -q '"TrainingJobName":"good".*"TrainingJobStatus":"Completed"' "$tmp/stdout" ||
   grep -q "controller restarted" "$tmp/stdout" || [[ "${#streams[@]}" != 1 ]] ||
   [[ -n "$missing" ]] || ! grep -q "taken back by process" "${streams[@]}"; then
  echo "FAIL kiln run takes back the job of a killed one: status $status; lines not once:$missing"
  cat "$tmp/stdout" "$tmp/stderr" "${streams[@]}"
  fail=1
else
  echo "ok   the next kiln run takes back the container of a killed one, every line once"
fi
exit $fail
