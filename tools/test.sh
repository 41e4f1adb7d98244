#!/usr/bin/env bash
# The test command: tools/test.sh [all|unit|ssh|lab] [pytest arguments...]; arguments, when given,
# take the place of each run's default folder (tests/unit, tests/e2e), e.g. tools/test.sh unit -k quoting
#   all   (the default; what CI runs) the system packages and .venv (tools/setup.sh), style and
#         types, the unit tier against the installed wheel with the lowest and the newest versions
#         pyproject.toml allows (.venv has the tested ones), while the lab's caches are made, the
#         VM lab booted and its tests run on it in the background, then the other end-to-end
#         tests beside them (root)
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

# The lab's part of the whole run, started first, in the background, in process groups of their
# own (set -m: an interrupted run ends all of them): the lab's images, package pools, Vagrant box
# and Open MPI made (tests/support/prewarm.py; niced, on the core style, types and the unit tiers
# leave), the VM lab booted on them (tests/support/keep_lab.py), the lab's tests run on it as soon
# as it is up (RDMAPROV_TEST_LAB; a lab that did not boot is booted by them) and it taken down
# after them. Beside them from the start, in a network namespace of their own where the pair's
# addresses are free, the lab_pair tests, which need only node1 and node2 as converged: they
# wait for the converge test to save the pair (RDMAPROV_TEST_LAB_SAVE, tests/conftest.py) and
# run on a copy booted from that save (RDMAPROV_TEST_LAB_COPY). A lab step mostly waits on one
# emulated CPU (a VM has one) and on boots, reboots and timeouts on purpose, so the unit tiers,
# the copy's tests and then the other end-to-end tests run in the core that leaves. The lab's
# tests and the lab_pair tests run no perftest, sshd or port on this machine that the unit tiers
# use (the other end-to-end tests do: the twins' ib_write_bw), so they may start before them.
lab_in_background() {
  lab_root=$(mktemp -d)
  lab_log=$lab_root/lab.log
  pair_log=$lab_root/pair.log
  local saved=$lab_root/pair
  copy_ns=rdmaprov-pair-$$
  ip netns add "$copy_ns"
  ip netns exec "$copy_ns" ip link set lo up
  set -m
  (
    set +e
    nice -n 19 .venv/bin/python -m tests.support.prewarm
    attach=""
    RDMAPROV_TEST_NET_SHARE=0/2 .venv/bin/python -m tests.support.keep_lab up "$lab_root" && attach=$lab_root/lab-vm
    RDMAPROV_TEST_LAB=$attach RDMAPROV_TEST_LAB_SAVE=$saved RDMAPROV_TEST_NET_SHARE=0/2 \
      run_pytest .venv --durations=0 -m "not lab_only and not lab_pair" tests/e2e/test_lab.py
    code=$?
    # a run that ended before its converge test saved the pair: the copy's tests stop waiting
    [[ -e $saved/saved.json || -e $saved.failed ]] || echo "the lab's tests ended before saving the pair" >"$saved.failed"
    lab_vm_down || code=1
    exit $code
  ) </dev/null >"$lab_log" 2>&1 &
  lab_pid=$!
  RDMAPROV_TEST_LAB_COPY=$saved netns=$copy_ns \
    run_pytest .venv --durations=0 -m "lab_pair and not lab_only" tests/e2e/test_lab.py </dev/null >"$pair_log" 2>&1 &
  pair_pid=$!
  set +m
  # ended with this script, their output shown, however the script ends
  trap 'kill -INT -- -"$lab_pid" -"$pair_pid" 2>/dev/null; wait "$lab_pid" "$pair_pid" || true; lab_output
    lab_gone || true' EXIT
  trap 'exit 130' INT TERM
  echo "test: the VM lab's tests start in the background once it is up (log: $lab_log), and the lab_pair" \
    "tests on a copy of its converged pair (log: $pair_log); their output comes at the end"
}

# The other end-to-end tests (real SSH hosts, twins, Vagrant's own VMs), while the lab's run on;
# then every part's output, each that failed named. Each takes its test networks from its own
# half of the ranges (tests/support/netbands.py).
end_to_end() {
  local code=0 pair=0 others=0
  echo "test: the end-to-end tests other than the VM lab's:"
  RDMAPROV_TEST_NET_SHARE=1/2 run_pytest .venv --durations=0 --ignore=tests/e2e/test_lab.py tests/e2e || others=$?
  wait "$lab_pid" || code=$?
  wait "$pair_pid" || pair=$?
  trap - EXIT INT TERM
  lab_output
  lab_gone || code=1
  [[ $code -eq 0 ]] || echo "test: failed: the VM lab's end-to-end tests" >&2
  [[ $pair -eq 0 ]] || echo "test: failed: the lab_pair tests on the copy of the VM lab's pair" >&2
  [[ $others -eq 0 ]] || echo "test: failed: the end-to-end tests other than the VM lab's" >&2
  [[ $code -eq 0 && $pair -eq 0 && $others -eq 0 ]]
}

lab_output() {
  echo "test: the VM lab's end-to-end tests:"
  cat "$lab_log" || true
  echo "test: the lab_pair tests on a copy of the VM lab's converged pair:"
  cat "$pair_log" || true
}

# The VM lab down (the lab's tests leave a lab they attached to up): what it stopped and removed
# is said only if taking it down failed.
lab_vm_down() {
  local out dir=$lab_root/lab-vm
  if [[ -e $dir/state.json ]] && ! out=$(.venv/bin/python -m rdmaprov lab --dir "$dir" down 2>&1); then
    echo "test: taking the VM lab in $dir down failed:" >&2
    echo "$out" >&2
    return 1
  fi
}

# Everything of the lab's part gone: the VM lab (down already unless the run was cut short), the
# copy of its pair (its tests take it down themselves) and its network namespace, their folder.
lab_gone() {
  local code=0 copy=$lab_root/copy/lab-vm
  lab_vm_down || code=1
  if [[ -e $copy/state.json ]]; then
    ip netns exec "$copy_ns" .venv/bin/python -m rdmaprov lab --dir "$copy" down >/dev/null || code=1
  fi
  ip netns del "$copy_ns" || code=1
  rm -rf "$lab_root"
  return $code
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
    [[ $# -gt 0 ]] || lab_in_background
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
    if [[ $# -gt 0 ]]; then
      run_pytest .venv --durations=0 "$@"
    else
      end_to_end
    fi
    ;;
esac
