"""Boot the test suite's VM lab and keep it up, for working on lab tests without a boot per run:

    python -m tests.support.keep_lab up DIR      # prints the lab directory
    RDMAPROV_TEST_LAB=DIR/lab-vm pytest tests/e2e/test_lab.py -k …
    python -m tests.support.keep_lab down DIR

The lab is the one `vm_lab` boots (3 VMs, node1 and node2 the cluster); tests that change a
node leave it changed, so only a run on a lab booted for it is proof: `tools/test.sh` boots one
this way beside the unit tiers, for its lab tests to attach to, and takes it down after them.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.lab import VM_LAB_RELEASES, TestLab


def main(action: str, root: str) -> int:
    if action == "up":
        lab = TestLab(Path(root), "vm", 3, "k", members=2, release=VM_LAB_RELEASES).up()
        print(lab.dir)
        return 0
    lab = TestLab.attach(Path(root) / "lab-vm", "vm", 3, members=2)
    proc = lab.down()
    print(proc.stdout, proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
