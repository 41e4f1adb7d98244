#!/usr/bin/env bash
# Move the tested set forward: the newest versions pyproject.toml allows, written to
# constraints/tested.txt. Run tools/test.sh afterwards and commit the file with what it needed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q '.[test]'
{
  sed -n '/^#/p' constraints/tested.txt
  "$venv/bin/python" -m pip freeze --exclude rdmaprov
} > constraints/tested.txt.new
mv constraints/tested.txt.new constraints/tested.txt
git --no-pager diff --stat -- constraints/tested.txt
