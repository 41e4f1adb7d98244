#!/usr/bin/env bash
# Set up (tools/setup.sh) and run the whole test suite: unit tests, then the end-to-end tests on
# real SSH hosts, containers and SoftRoCE VMs (root needed; the lab image is cached).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
set +e
.venv/bin/python -m pytest -ra "$@"
code=$?
set -e
if [[ $code -eq 5 ]]; then
  echo "test: no tests were collected" >&2
  exit 1
fi
exit $code
