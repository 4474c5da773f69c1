"""harness.py: what the test_*.py scripts here share, as tests/harness.sh is for the shell ones.

check(cond, msg) counts a failure and goes on; finish() prints the count and gives the exit
status; need_torch() exits 77 (a skip) where PyTorch is missing; port_block() claims a block of
8 ports as tests/ports.sh does; run_case(cases, worker, files, cleanup) is a script's main:
its worker, or the case its first argument names, timed.

A case and the workers it starts read their script, this file, the package (PYTHONPATH) and
HETRING_LIB from the tree as it is when each process starts, so a file changed during a run
(an edit, a checkout, a file swapped for a break test) has them run other code than each
other: run_case says so, naming the files, in a worker that starts on other files than its
case did and at the end of a case whose files changed. A worker is the script's own ("worker"
as its first argument), or a script of its own that the case names in `files` and that calls
worker_changed() first (test_torch.py's torch_worker.py, test_models.py's model_worker.py).
"""
import hashlib
import importlib.util
import json
import os
import random
import signal
import sys
import tempfile
import time

SOURCES_ENV = "HETRING_TEST_SOURCES"  # a case's sources() as its workers inherit them (JSON)

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


def source_files(extra=()):
    """The files this process runs on: its script, this file, extra, the modules of the hetring
    package PYTHONPATH finds, HETRING_LIB."""
    spec = importlib.util.find_spec("hetring")  # where it is, not importing it
    files = [os.path.abspath(sys.argv[0]), os.path.abspath(__file__)]
    files += [os.path.abspath(f) for f in extra]
    for d in spec.submodule_search_locations if spec else ():
        files += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".py"))
    if os.environ.get("HETRING_LIB"):
        files.append(os.environ["HETRING_LIB"])
    return files


def boot_ticks():
    """Now, in clock ticks since boot: the unit of a process's start time (/proc/PID/stat)."""
    with open("/proc/uptime") as f:
        s, cs = f.read().split()[0].split(".")  # seconds, and hundredths (no float rounding)
    return (int(s) * 100 + int(cs)) * os.sysconf("SC_CLK_TCK") // 100


def group_and_start(pid):
    """(process group, start time in clock ticks since boot) of pid, a process that runs; None
    once it does not (gone, or a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else (int(fields[2]), int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def kill_groups(procs):
    """SIGKILL to the process group of each Popen of procs, started with start_new_session (a
    worker and its loader workers), and to no other process. A worker not reaped yet holds its
    pid, the group's id. One reaped gave its pid back, and once the last of its group ended,
    another process of the machine (another test's worker, a `timeout`) may lead a group of
    that id: of its group only the processes that started before the reap (p.reaped, the
    boot_ticks() its waiter noted) are its own; without p.reaped none is signalled."""
    for p in procs:
        if p.returncode is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            continue
        reaped = getattr(p, "reaped", None)
        for d in os.listdir("/proc") if reaped is not None else ():
            gs = group_and_start(d) if d.isdigit() else None
            if gs and gs[0] == p.pid and gs[1] <= reaped:
                try:
                    os.kill(int(d), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def sources(extra=()):
    """The files a script here runs on (source_files(extra): extra, the worker scripts its
    cases start), each with the SHA-1 of its bytes (None: unreadable)."""
    out = {}
    for f in source_files(extra):
        try:
            with open(f, "rb") as fh:
                out[f] = hashlib.sha1(fh.read()).hexdigest()
        except OSError:
            out[f] = None
    return out


def changed(before):
    """The files of before (sources()) whose bytes are not those now, and the files this
    process runs on that before does not hold."""
    now = sources(before.keys())
    return sorted(f for f in before.keys() | now.keys() if before.get(f) != now.get(f))


def worker_changed():
    """In a worker a case started: the files changed since its case began, said on stderr
    (none where no case started it). A worker of its own (not the script's "worker") calls it
    first and exits 1 where there are any."""
    diff = changed(json.loads(os.environ[SOURCES_ENV])) if SOURCES_ENV in os.environ else []
    if diff:
        print(f"harness: {', '.join(diff)} changed since the case that started this worker "
              f"began: the worker would run other code than the case; run the test again "
              f"on a tree that holds still", file=sys.stderr)
    return diff


def run_case(cases, worker, files=(), cleanup=None):
    """A script's entry: `worker` with the arguments after "worker" (a node the case started),
    or cases[argv[1]](dir, port) in a temporary directory with a claimed block of ports, then
    cleanup() (even when the case raised) and finish(), with the case's time. files: the worker
    scripts of its own that the cases start. Returns the exit status: the case's 77 (a skip),
    1 for a worker that starts on other files than its case did, and a failed check for a case
    whose files changed."""
    if sys.argv[1] == "worker" and worker:
        return 1 if worker_changed() else worker(*sys.argv[2:])
    t0 = time.monotonic()
    before = sources(files)
    os.environ[SOURCES_ENV] = json.dumps(before)
    port, claim = port_block()
    try:
        with tempfile.TemporaryDirectory(prefix="hetring-py.") as d:
            rc = cases[sys.argv[1]](d, port)
    finally:
        if cleanup:
            cleanup()
        os.rmdir(claim)
    if rc == 77:
        return 77
    diff = changed(before)
    check(not diff, f"{', '.join(diff)} changed during the case: it and its workers may have "
                    f"run other code than each other; run the test again on a tree that holds "
                    f"still")
    rc = finish(rc if isinstance(rc, int) else 0)
    print(f"{sys.argv[1]}: {time.monotonic() - t0:.1f} s")
    return rc
