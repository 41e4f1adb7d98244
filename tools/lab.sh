#!/usr/bin/env bash
# The main job on the local lab, from a fresh clone: set up, boot 2 SoftRoCE VMs, converge them
# (apply, then verify and the gates), then show that `check` finds nothing left to change and that
# the RDMA port is active. rdmaprov is in .venv/bin (`. .venv/bin/activate` puts it on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
RDMAPROV=.venv/bin/rdmaprov
if ! $RDMAPROV lab status --json | grep -q '"ssh": true'; then
  $RDMAPROV lab up
fi
set +e
$RDMAPROV apply inventories/lab.yaml
code=$?
set -e
if (( code & 4 )); then exit "$code"; fi
$RDMAPROV check inventories/lab.yaml
$RDMAPROV lab ssh node1 -- ibv_devinfo -d rxe0
cat <<NEXT
lab ready. Next, one command a line (or . .venv/bin/activate, then rdmaprov …):
  $RDMAPROV lab ssh node1
  $RDMAPROV verify inventories/lab.yaml --gates
  $RDMAPROV lab down
NEXT
