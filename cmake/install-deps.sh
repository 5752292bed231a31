#!/usr/bin/env bash
# Installs Kiln's build and test dependencies from Debian 12's packages, only
# those that are missing. Safe to run again: when everything is there it
# installs nothing, runs no apt-get update, and prints one line.
# Runs as root, or through sudo otherwise; never asks a question.
#
#   bash cmake/install-deps.sh
set -euo pipefail

# The one list of Debian packages Kiln needs (cmake/KilnDependencies.cmake
# finds the libraries among them).
KILN_DEBIAN_PACKAGES=(
  build-essential
  cmake
  pkg-config
  libabsl-dev
  libprotobuf-dev
  protobuf-compiler
  libfmt-dev
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  libpcre2-dev
  libsimgrid-dev
  libcurl4-openssl-dev
  libssl-dev
  # The openssl command: tests/serve/serve_tls_test.py makes its certificate
  # with it.
  openssl
  libarchive-dev
  zlib1g-dev
  libsqlite3-dev
  libboost-dev
  libgrpc++-dev
  protobuf-compiler-grpc
  # ip and nsenter: the multi-host tests make hosts of network namespaces.
  iproute2
  libfuse3-dev
  libseccomp-dev
  fuse3
  bubblewrap
  python3
  clang
  clang-format
  libclang-rt-14-dev
  # The report's screenshot test (tests/sim/report_screenshot_test.py) opens
  # the `kiln simulate --report` page in headless Chromium; without it the
  # test is skipped.
  chromium
  fonts-dejavu-core
)
# botocore (tools/schema/generate-schema.py reads the service model from it) usually
# comes with the machine's python3 (pyenv pip); Debian's package is the
# fallback, for Debian's own python3.
KILN_BOTOCORE_PACKAGE=python3-botocore
KILN_AWSCLI_PACKAGE=awscli

is_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" == "installed" ]]
}

has_botocore() {
  local py
  for py in python3 /usr/bin/python3; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import botocore' >/dev/null 2>&1; then
      return 0
    fi
  done
  return 1
}

missing=()
for pkg in "${KILN_DEBIAN_PACKAGES[@]}"; do
  is_installed "$pkg" || missing+=("$pkg")
done
if ! has_botocore && ! is_installed "$KILN_BOTOCORE_PACKAGE"; then
  missing+=("$KILN_BOTOCORE_PACKAGE")
fi
# The AWS backend's tests use the aws CLI as an independent S3 client (the
# machine's pip-installed one, else Debian's awscli) and moto as the S3
# endpoint. Debian 12 has no moto package: without the preinstalled one the
# AWS tests fail and say so (they never pass silently).
if ! command -v aws >/dev/null 2>&1 && ! is_installed "$KILN_AWSCLI_PACKAGE"; then
  missing+=("$KILN_AWSCLI_PACKAGE")
fi
if ! python3 -c 'import moto.server' >/dev/null 2>&1; then
  echo "install-deps: warning: python3 cannot import moto (not packaged in Debian 12);" \
    "the AWS backend's tests (aws_s3_*) will fail until moto >= 5 is installed" >&2
fi

if ((${#missing[@]} == 0)); then
  echo "install-deps: all Kiln dependencies are installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo -n)
else
  echo "install-deps: not root and no sudo; install these yourself: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q </dev/null
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
