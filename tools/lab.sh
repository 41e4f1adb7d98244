#!/usr/bin/env bash
# The main job on the local lab, from a fresh clone: set up, boot 2 SoftRoCE VMs, converge them,
# then show that a second apply changes nothing and that the RDMA port is active.
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
echo "lab ready: rdmaprov lab ssh node1 | rdmaprov check inventories/lab.yaml | rdmaprov lab down"
