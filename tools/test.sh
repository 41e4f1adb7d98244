#!/usr/bin/env bash
# The test command: tools/test.sh [all|unit|ssh|lab] [pytest arguments...]; arguments, when given,
# take the place of each run's default folder (tests/unit, tests/e2e), e.g. tools/test.sh unit -k quoting
#   all   (the default; what CI runs) the system packages and .venv (tools/setup.sh), style and
#         types, the unit tier against the installed wheel with the lowest and the newest versions
#         pyproject.toml allows (.venv has the tested ones), the lab's caches made meanwhile,
#         then both end-to-end tiers side by side (root)
#   unit  style, types and the unit tests on this checkout: no root, no Debian packages
#   ssh   end-to-end tests on real SSH hosts in network namespaces (root)
#   lab   end-to-end tests on the QEMU SoftRoCE lab and on Vagrant (root; the lab image is cached),
#         those marked lab_only too, which `all` leaves out for CI's time
set -euo pipefail
cd "$(dirname "$0")/.."
tier=all
case "${1:-}" in all | unit | ssh | lab) tier=$1 && shift ;; esac

# pytest in a virtualenv (in the network namespace $netns, when set); no test collected is a
# failure, not a pass.
run_pytest() {
  local venv=$1 code=0
  shift
  ${netns:+ip netns exec "$netns"} "$venv/bin/python" -m pytest -ra -p no:cacheprovider "$@" || code=$?
  if [[ $code -eq 5 ]]; then
    echo "test: no tests were collected" >&2
    return 1
  fi
  return $code
}

# Style and types first (seconds): the formatter, the linter and mypy, configured in pyproject.toml.
style() {
  .venv/bin/ruff format --check .
  .venv/bin/ruff check .
  .venv/bin/mypy
}

# The unit tier against rdmaprov as users get it: the wheel (built from the sdist) installed in a
# virtualenv of its own with one set of versions: lowest (constraints/lowest.txt) or newest
# (whatever pyproject.toml's ranges allow today).
unit_on_wheel() {
  local set=$1 venv=.venv-wheel
  shift
  local pins=()
  [[ $set == newest ]] || pins=(-c "constraints/$set.txt")
  python3 -m venv --clear "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q "${pins[@]}" "$(ls dist/rdmaprov-*.whl)[test]"
  echo "test: unit tier on the installed wheel, $set versions"
  if ! RDMAPROV_TEST_INSTALLED=1 run_pytest "$venv" -q "${@:-tests/unit}"; then
    if [[ $set == newest ]]; then
      echo "test: the unit tier fails with the newest versions pyproject.toml allows; they differ from" \
        "constraints/tested.txt in:" >&2
      { diff <(grep -v '^#' constraints/tested.txt | sort -f) \
        <("$venv/bin/python" -m pip freeze --exclude rdmaprov | sort -f) || true; } | sed -n 's/^> /  /p' >&2
      echo "test: fix rdmaprov for them, or cap the range in pyproject.toml where a release breaks it" >&2
    else
      echo "test: the unit tier fails on the installed wheel with constraints/$set.txt" >&2
    fi
    return 1
  fi
}

# Three processes at once: the VM lab's tests (one shared lab, in order: the longest part); the
# lab tests that need only its converged pair (lab_pair), on a copy of node1 and node2 that the
# converge test saves (tests/conftest.py), booted in a network namespace of its own where their
# addresses are free; and every other end-to-end test (real SSH hosts, twins, Vagrant's own VMs).
# Each lab step mostly waits on one emulated CPU (each VM has one) and on boots, reboots and
# timeouts on purpose, so the copy's tests and the others run in the core that leaves. Their
# output follows the lab's, whole, once all have ended. The lab and the others take their test
# networks from their own halves of the ranges (tests/support/netbands.py). The copy's tests and
# the others run in process groups of their own (set -m), so that an interrupted run ends all of
# them, not only their shells.
side_by_side() {
  local log pair_log code=0 others=0 pair=0 saved=$lab_root/pair
  log=$(mktemp)
  pair_log=$(mktemp)
  copy_ns=rdmaprov-pair-$$
  ip netns add "$copy_ns"
  ip netns exec "$copy_ns" ip link set lo up
  set -m
  RDMAPROV_TEST_NET_SHARE=1/2 run_pytest .venv --durations=0 --ignore=tests/e2e/test_lab.py tests/e2e >"$log" 2>&1 &
  local pid=$!
  RDMAPROV_TEST_LAB_COPY=$saved netns=$copy_ns \
    run_pytest .venv --durations=0 -m "lab_pair and not lab_only" tests/e2e/test_lab.py >"$pair_log" 2>&1 &
  local pair_pid=$!
  set +m
  # ended with this script, their output shown, however the script ends
  trap 'kill -INT -- -"$pid" -"$pair_pid" 2>/dev/null; wait "$pid" "$pair_pid" || true; cat "$pair_log" "$log"
    rm -f "$log" "$pair_log"; copy_down || true; lab_down || true' EXIT
  trap 'exit 130' INT TERM
  echo "test: the end-to-end tests other than the VM lab's (pid $pid) and the lab_pair tests on a copy of" \
    "its converged pair (pid $pair_pid) run beside it; their output comes after"
  RDMAPROV_TEST_LAB=${lab_attach:-} RDMAPROV_TEST_LAB_SAVE=$saved RDMAPROV_TEST_NET_SHARE=0/2 \
    run_pytest .venv --durations=0 -m "not lab_only and not lab_pair" tests/e2e/test_lab.py || code=$?
  # a run that ended before its converge test saved the pair: the copy's tests stop waiting for it
  [[ -e $saved/saved.json || -e $saved.failed ]] || echo "the lab's tests ended before saving the pair" >"$saved.failed"
  wait "$pair_pid" || pair=$?
  copy_down || pair=1
  lab_down || code=1
  wait "$pid" || others=$?
  trap - EXIT INT TERM
  echo "test: the lab_pair tests on a copy of the VM lab's converged pair:"
  cat "$pair_log"
  echo "test: the end-to-end tests other than the VM lab's:"
  cat "$log"
  rm -f "$log" "$pair_log"
  [[ $code -eq 0 ]] || echo "test: failed: the VM lab's end-to-end tests" >&2
  [[ $pair -eq 0 ]] || echo "test: failed: the lab_pair tests on the copy of the VM lab's pair" >&2
  [[ $others -eq 0 ]] || echo "test: failed: the end-to-end tests other than the VM lab's" >&2
  [[ $code -eq 0 && $pair -eq 0 && $others -eq 0 ]]
}

# The copy of the pair down (its tests take it down themselves; this is for a run cut short),
# then its network namespace removed.
copy_down() {
  [[ -n ${copy_ns:-} ]] || return 0
  local dir=$lab_root/copy/lab-vm code=0
  if [[ -e $dir/state.json ]]; then
    ip netns exec "$copy_ns" .venv/bin/python -m rdmaprov lab --dir "$dir" down >/dev/null || code=1
  fi
  ip netns del "$copy_ns" || code=1
  copy_ns=""
  return $code
}

# The lab's images, package pools, Vagrant box and Open MPI made in the background while style,
# types and the unit tiers use one core (tests/support/prewarm.py; niced, so that it takes the
# other core and leaves theirs), in a process group of its own, ended with the script if it ends
# first; then, on those caches, the VM lab booted (tests/support/keep_lab.py; not niced: its VMs
# run every lab test after), so that its boot, a minute of the other core, is done when the lab's
# tests start and attach to it (RDMAPROV_TEST_LAB). The end-to-end tiers start once both are
# done; it says how long the caches took, and what failed (a test that needs that cache then
# makes it, or says why it cannot; a lab that did not boot is booted by the lab's tests).
prewarm() {
  prewarm_log=$(mktemp)
  lab_root=$(mktemp -d)
  set -m
  {
    nice -n 19 .venv/bin/python -m tests.support.prewarm
    RDMAPROV_TEST_NET_SHARE=0/2 .venv/bin/python -m tests.support.keep_lab up "$lab_root"
  } </dev/null >"$prewarm_log" 2>&1 &
  prewarm_pid=$!
  set +m
  trap 'kill -- -"$prewarm_pid" 2>/dev/null || true; wait "$prewarm_pid" || true; lab_down || true; rm -f "$prewarm_log"' EXIT
  trap 'exit 130' INT TERM
}

prewarmed() {
  if wait "$prewarm_pid"; then
    grep '^prewarm: ' "$prewarm_log" || true
    lab_attach=$lab_root/lab-vm
    echo "test: the VM lab booted beforehand: $lab_attach"
  else
    echo "test: making the lab's caches or booting the lab beforehand failed (the tests make or boot them):" >&2
    cat "$prewarm_log" >&2
  fi
  trap 'lab_down || true' EXIT # side_by_side's own trap takes it down from there on
  rm -f "$prewarm_log"
}

# The lab prewarm booted, taken down (the lab's tests leave a lab they attached to up): what it
# stopped and removed is said only if taking it down failed.
lab_down() {
  [[ -n ${lab_root:-} ]] || return 0
  local out dir=$lab_root/lab-vm
  if [[ -e $dir/state.json ]] && ! out=$(.venv/bin/python -m rdmaprov lab --dir "$dir" down 2>&1); then
    echo "test: taking the VM lab in $lab_root down failed:" >&2
    echo "$out" >&2
    return 1
  fi
  rm -rf "$lab_root"
  lab_root=""
}

case $tier in
  unit)
    bash tools/setup.sh --python
    style
    run_pytest .venv "${@:-tests/unit}"
    ;;
  ssh | lab)
    bash tools/setup.sh
    marks=(-m "e2e and not lab")
    [[ $tier == lab ]] && marks=(-m lab)
    run_pytest .venv "${marks[@]}" --durations=0 "${@:-tests/e2e}"
    ;;
  all)
    bash tools/setup.sh
    [[ $# -gt 0 ]] || prewarm
    style
    rm -rf dist
    .venv/bin/python -m build --outdir dist . >dist.log 2>&1 || {
      cat dist.log >&2
      exit 1
    }
    # not the tested versions: .venv has them (the end-to-end tiers run on it; `unit` tests it)
    for set in lowest newest; do
      unit_on_wheel "$set" "$@"
    done
    [[ $# -gt 0 ]] || prewarmed
    if [[ $# -gt 0 ]]; then
      run_pytest .venv --durations=0 "$@"
    else
      side_by_side
    fi
    ;;
esac
