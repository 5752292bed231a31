#!/usr/bin/env bash
# `kiln token create`, end to end: it makes the PKI on first use and prints a
# new one-time token each time; a bad --ttl or no --pki is refused naming the
# flag. Usage: cli_token_test.sh KILN
set -euo pipefail
kiln="$1"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "cli_token_test: $*" >&2; exit 1; }

first="$("$kiln" token create --pki "$work/pki" --ttl 60)"
[[ "$first" =~ ^kiln1\.[0-9a-f]{16}\.[0-9a-f]{64}$ ]] || fail "not a token: '$first'"
for f in ca.pem ca.key controller.pem controller.key; do
  [[ -s "$work/pki/$f" ]] || fail "no $f in the new PKI"
done
[[ "$(stat -c %a "$work/pki")" == 700 ]] || fail "the PKI directory is not 0700"
[[ "$(stat -c %a "$work/pki/ca.key")" == 600 ]] || fail "ca.key is not 0600"
ca_before="$(cat "$work/pki/ca.pem")"

second="$("$kiln" token create --pki "$work/pki")"
[[ "$second" =~ ^kiln1\. ]] || fail "not a token: '$second'"
[[ "$first" != "$second" ]] || fail "two tokens are the same"
[[ "$(cat "$work/pki/ca.pem")" == "$ca_before" ]] || fail "the CA changed"
# Only the token's id is a file name; the secret is nowhere in the directory.
secret="${first##*.}"
if grep -rq "$secret" "$work/pki"; then fail "the secret is stored"; fi
# The controller's certificate verifies under the CA (openssl, when present).
if command -v openssl >/dev/null; then
  openssl verify -CAfile "$work/pki/ca.pem" "$work/pki/controller.pem" >/dev/null \
    || fail "openssl does not verify the controller's certificate"
fi

expect_refused() {
  local what="$1"; shift
  local out status=0
  out="$("$kiln" "$@" 2>&1)" || status=$?
  [[ $status == 1 ]] || fail "$*: exit $status, wanted 1"
  [[ "$out" == *"$what"* ]] || fail "$*: '$out' does not mention '$what'"
}
expect_refused "--ttl" token create --pki "$work/pki" --ttl abc
expect_refused "--ttl" token create --pki "$work/pki" --ttl 0
expect_refused "--ttl" token create --pki "$work/pki" --ttl -5
expect_refused "--pki" token create --ttl 60
expect_refused "unknown subcommand" token list --pki "$work/pki"
# A damaged PKI is an error naming the file, never made anew.
"$kiln" token create --pki "$work/broken" --controller-name ctl.example >/dev/null
rm "$work/broken/controller.pem"
expect_refused "controller.pem" token create --pki "$work/broken"
[[ ! -e "$work/broken/controller.pem" ]] || fail "a damaged PKI was made anew"
echo "cli_token_test: ok"
