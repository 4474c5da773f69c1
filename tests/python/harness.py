"""harness.py: what the test_*.py scripts here share, as tests/harness.sh is for the shell ones.

check(cond, msg) counts a failure and goes on; finish() prints the count and gives the exit
status; need_torch() exits 77 (a skip) where PyTorch is missing; port_block() claims a block of
8 ports as tests/ports.sh does; run_case(cases, worker) is a script's main: its worker, or the
case its first argument names, timed.
"""
import os
import random
import sys
import tempfile
import time

failures = 0


def check(cond, msg):
    global failures
    if not cond:
        failures += 1
        print("CHECK failed: " + msg, file=sys.stderr)


def finish(rc=0):
    """The exit status: 1 where a check failed or rc is not 0 (after the count), else 0."""
    if failures:
        print(f"{failures} check(s) failed", file=sys.stderr)
    return 1 if failures or rc else 0


def need_torch():
    """Exit 77 where this interpreter has no PyTorch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: PyTorch is not installed for " + sys.executable +
              " (Debian: apt-get install python3-torch)")
        sys.exit(77)


def port_block():
    """A block of 8 ports claimed as tests/ports.sh claims them (an atomic mkdir): the first
    port and the claim, to be removed at the end."""
    tmp = os.environ.get("TMPDIR") or "/tmp"
    for _ in range(200):
        base = 10000 + random.randrange(2700) * 8
        try:
            os.mkdir(os.path.join(tmp, f"hetring-ports.{base}"))
            return base, os.path.join(tmp, f"hetring-ports.{base}")
        except FileExistsError:
            continue
    raise RuntimeError("no free block of ports")


def run_case(cases, worker):
    """A script's entry: `worker` with the arguments after "worker" (a node the case started),
    or cases[argv[1]](dir, port) in a temporary directory with a claimed block of ports, then
    finish(), with the case's time. Returns the exit status."""
    if sys.argv[1] == "worker":
        return worker(*sys.argv[2:])
    t0 = time.monotonic()
    port, claim = port_block()
    try:
        with tempfile.TemporaryDirectory(prefix="hetring-py.") as d:
            cases[sys.argv[1]](d, port)
    finally:
        os.rmdir(claim)
    rc = finish()
    print(f"{sys.argv[1]}: {time.monotonic() - t0:.1f} s")
    return rc
