#!/usr/bin/env bash
# The line between Kiln's public API and its internals, checked on the sources:
# - public headers (include/kiln) include only public headers;
# - a backend (lib/sim, lib/local, lib/aws) includes the public API and plugin
#   kit (include/kiln), lib/base and its own headers (lib/<backend>), never
#   another library's internals (in particular never lib/core/internal);
# - lib/base depends on nothing of Kiln's;
# - examples and the kiln program (tools/kiln) use the public API only.
# Usage: layering_test.sh REPOSITORY_ROOT. Prints each offending include.
set -euo pipefail
cd "$1"

failed=0
# check DIR ALLOWED_REGEX WHAT: every quoted include under DIR whose path has
# a directory part must match ALLOWED_REGEX (Abseil, protobuf, gtest, fmt and
# other third-party headers are allowed everywhere).
check() {
  local dir="$1" allowed="$2" what="$3"
  [[ -d "$dir" ]] || return 0
  local third_party='^(absl|google|gtest|gmock|benchmark|fmt|openssl|curl|archive|fuse|seccomp|pcre2|sqlite3)'
  while IFS= read -r line; do
    local file="${line%%:*}" path
    path="$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")"
    [[ "$path" != */* ]] && continue
    [[ "$path" =~ $third_party ]] && continue
    [[ "$path" =~ $allowed ]] && continue
    echo "$file: includes \"$path\": $what"
    failed=1
  done < <(grep -rHn --include='*.h' --include='*.cc' -E '^#include "' "$dir" | sed -E 's/^([^:]+):[0-9]+:/\1:/')
}

check include/kiln '^kiln/' "a public header includes only public headers"
check lib/base '^base/' "lib/base depends on nothing of Kiln's"
for backend in sim local aws journal_sqlite; do
  check "lib/$backend" "^(kiln/|base/|$backend/)" \
    "a backend uses include/kiln, lib/base and its own internals only"
done
# (kiln::serve signs and checks signatures with kiln::aws's SigV4 code, and
# its client speaks HTTP through kiln::aws's.)
check lib/serve '^(kiln/|base/|serve/|aws/internal/(sigv4|http)\.h$)' \
  "kiln::serve uses include/kiln, lib/base, its own internals and kiln::aws's SigV4 and HTTP"
check lib/agent '^(kiln/|base/|agent/)' \
  "kiln::agent uses include/kiln, lib/base and its own internals only"
check examples '^kiln/' "an example uses the public API only"
check tools/kiln '^(kiln/|tools/kiln/)' "the kiln program uses the public API only"

if ((failed)); then
  echo "layering_test: FAILED"
  exit 1
fi
echo "layering_test: ok"
