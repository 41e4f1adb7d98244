#!/usr/bin/env bash
# Set up (tools/setup.sh), check style and types, and run the whole test suite: unit tests, then the
# end-to-end tests on real SSH hosts, containers and SoftRoCE VMs (root needed; the lab image is cached).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
# Style and types first (seconds): the formatter, the linter and mypy, configured in pyproject.toml.
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy
set +e
.venv/bin/python -m pytest -ra "$@"
code=$?
set -e
if [[ $code -eq 5 ]]; then
  echo "test: no tests were collected" >&2
  exit 1
fi
exit $code
