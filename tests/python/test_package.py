"""test_package.py: the hetring package without PyTorch: it imports, reports its version and
the loaded library's (refusing a library of another minor version), turns a library failure into hetring.Error with the status and message,
refuses step() buffers that are not (address, count) pairs (address 0 only with a count of 0)
and raw-address calls given a negative size or address 0 with a size, and says when a node
was closed,
and installs with pip (into a temporary directory, from a copy of python/); harness.run_case
names a file changed under a run of a test script, in the worker and in the case.

    test_package.py import | pip | harness
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time

from harness import boot_ticks, check, finish, group_and_start, kill_groups


def test_import():
    import hetring
    print(f"hetring {hetring.__version__} from {hetring.__file__}, library "
          f"{hetring.library_version()} ({hetring._L.path})")
    check(hetring.__version__ == hetring.library_version(),
          "the package and the library versions differ")
    with tempfile.TemporaryDirectory() as d:
        ini = os.path.join(d, "bad.ini")
        with open(ini, "w") as f:
            f.write("[train]\nglobal_batch = 0\n[node.0]\nhost = 127.0.0.1\nport = 1\n")
        try:
            hetring.Node(ini, node_id=0)
            check(False, "a bad configuration opened")
        except hetring.Error as e:
            print(f"bad configuration: status {e.status}: {e}")
            check(e.status == 2 and "global_batch" in str(e), f"the error: {e.status} {e}")
    check(hetring.hash_bytes(0, 0) == hetring.hash_bytes(0, 0, 0), "hash")
    # a library of another minor version passes other structures: refused by name
    major, minor, _ = hetring.__version__.split(".")
    try:
        hetring._check_version(f"{major}.{int(minor) - 1}.9", "/x/libhetring.so.0")
        check(False, "a library of the previous minor version was accepted")
    except OSError as e:
        print(f"another library version: {e}")
        check("/x/libhetring.so.0" in str(e), f"{e}")
    hetring._check_version(f"{major}.{minor}.7", "patch releases share the structures")
    # a cluster given as a mapping (the INI in memory): a misspelt key is named with its line
    conf = {"cluster": {"security": "none"}, "train": {"sampels": 5},
            "nodes": [{"host": "127.0.0.1", "port": 1}]}
    check(hetring.ini_text(conf) == "[cluster]\nsecurity = none\n[train]\nsampels = 5\n"
          "[node.0]\nhost = 127.0.0.1\nport = 1\n", f"ini_text: {hetring.ini_text(conf)!r}")
    try:
        hetring.Node(conf, node_id=0)
        check(False, "a mapping with a misspelt key opened")
    except hetring.Error as e:
        print(f"mapping with a misspelt key: {e}")
        check(e.status == 2 and "conf_text:4" in str(e) and "sampels" in str(e), f"{e}")
    # a [train] key only the built-in trainer reads would be ignored: refused, at its line
    conf = {"cluster": {"security": "none"}, "train": {"momentum": 0.5},
            "nodes": [{"host": "127.0.0.1", "port": 1}]}
    try:
        hetring.Node(conf, node_id=0)
        check(False, "a mapping with [train] momentum opened")
    except hetring.Error as e:
        print(f"mapping with a trainer-only key: {e}")
        check(e.status == 2 and "conf_text:4: [train] momentum is set, but libhetring does not "
              "use it" in str(e), f"{e}")
    test_buffers()
    # overrides is a list of strings: one string alone was read letter by letter ("--set t:
    # malformed"), and a number failed inside os.fsencode
    for bad in ("train.iterations=5", [5]):
        try:
            hetring.Node({"cluster": {"security": "none"},
                          "nodes": [{"host": "127.0.0.1", "port": 1}]}, node_id=0, overrides=bad)
            check(False, f"overrides={bad!r} was taken")
        except TypeError as e:
            print(f"overrides={bad!r}: {e}")
            check("expected a list of 'section.key=value' strings" in str(e), f"{e}")
    # a log setting the library cannot honour is refused by hetring_open (it was dropped)
    os.environ["HETRING_LOG"] = "ring=loud"
    try:
        hetring.Node({"cluster": {"security": "none"}, "nodes": [{"host": "127.0.0.1", "port": 1}]},
                     node_id=0)
        check(False, "a bad HETRING_LOG was accepted")
    except hetring.Error as e:
        print(f"bad HETRING_LOG: {e}")
        check(e.status == 2 and "HETRING_LOG: bad item 'ring=loud'" in str(e), f"{e}")
    finally:
        del os.environ["HETRING_LOG"]
    for bad in ({"train": {"layers": None}}, {"train": {"seed": "1\n[x]"}}, {"train": 3}):
        try:
            hetring.ini_text(bad)
            check(False, f"ini_text accepted {bad}")
        except ValueError as e:
            print(f"ini_text refuses {bad}: {e}")


def test_buffers():
    """step() takes a list of (address, float32 count) pairs: anything else is refused by name
    before the library sees it (a float32 array passed as it is raised "cannot unpack
    non-iterable numpy.float32 object"; a null address reached the library); a closed node
    says so (it said "invalid argument")."""
    import array
    import hetring
    conf = {"cluster": {"security": "none"}, "train": {"global_batch": 8, "iterations": 2},
            "nodes": [{"host": "127.0.0.1", "port": 1}]}
    node = hetring.Node(conf, node_id=0, n_samples=64)
    g = array.array("f", [1.0] * 4)
    addr = g.buffer_info()[0]
    check(node.next() is not None, "no first batch")
    for bad, kind, text in ((g, TypeError, "buffers is a array"),
                            ([g], TypeError, "buffers[0] is array"),
                            ([], ValueError, "buffers is empty"),
                            ([(addr, 4, 1)], TypeError, "buffers[0] is tuple"),
                            ([(addr, 4.0)], TypeError, "buffers[0] is tuple"),
                            ([(0, 4)], ValueError, "buffers[0] = (0, 4): the address"),
                            ([(addr, 4), (-8, 0)], ValueError,
                             "buffers[1] = (-8, 0): the address"),
                            ([(addr, -1)], ValueError, "buffers[0] = (" + str(addr) + ", -1)")):
        try:
            node.step(bad, 0.01, 1.0)
            check(False, f"step() took {bad!r:.40}")
        except kind as e:
            print(f"step({bad!r:.30}): {type(e).__name__}: {e}")
            check(str(e).startswith("hetring: " + text) and "(address, float32 count)" in str(e),
                  f"the error: {e}")
    # the raw-address calls refuse a negative size (the library takes a size_t: -1 is 2^64 - 1;
    # hash_bytes(addr, -1) crashed, allreduce(addr, -1) was taken) and address 0 with a size
    for call, text in ((lambda: node.allreduce(addr, -1), "Node.allreduce(address="),
                       (lambda: node.allreduce(0, 4), "Node.allreduce(address=0, count=4)"),
                       (lambda: node.matrices([(2, 2), (-1, 4)]), "matrices: shapes[1]"),
                       (lambda: hetring.hash_bytes(0, 4), "hash_bytes(address=0, nbytes=4)"),
                       (lambda: hetring.hash_bytes(addr, -1), "hash_bytes(address=")):
        try:
            call()
            check(False, f"{text} was taken")
        except ValueError as e:
            print(f"refused: {e}")
            check(str(e).startswith("hetring: " + text) and "0 or more" in str(e), f"{e}")
    check(node.allreduce(addr, 4) and list(g) == [1.0] * 4, f"allreduce on 1 node: {list(g)}")
    check(hetring.hash_bytes(addr, 0) == hetring.hash_bytes(0, 0), "hash of 0 bytes")
    # the same iteration, now with a valid list: an empty buffer (an empty tensor's data_ptr()
    # is 0) beside the floats, as the library takes it
    res = node.step([(addr, 4), (0, 0)], 0.01, 1.0)
    check(res is not None and list(g) == [1 / 8] * 4, f"a valid step (sums / B = 8): {list(g)}")
    node.close()
    try:
        node.next()
        check(False, "a closed node gave a batch")
    except hetring.Error as e:
        print(f"closed: {e}")
        check("this node was closed" in str(e), f"the error: {e}")


def test_pip(src):
    try:
        import setuptools  # noqa: F401
        import pip  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e.name} is not installed for {sys.executable}")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as d:
        copy = os.path.join(d, "python")
        shutil.copytree(src, copy, ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                                 "__pycache__"))
        target = os.path.join(d, "site")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation",
                            "--no-deps", "--target", target, copy], capture_output=True,
                           text=True)
        check(r.returncode == 0, f"pip install failed: {r.stderr[-2000:]}")
        env = dict(os.environ, PYTHONPATH=target)
        r = subprocess.run([sys.executable, "-c", "import hetring; print(hetring.__version__, "
                            "hetring.__file__, hetring.library_version())"],
                           capture_output=True, text=True, env=env, cwd=d)
        print("installed: " + r.stdout.strip())
        check(r.returncode == 0 and r.stdout.startswith("0.3.1 " + target),
              f"the installed package: {r.stdout} {r.stderr[-2000:]}")


# a script of run_case's in a folder of its own: its cases start a worker on the files as
# they are, start one while its own file is swapped (then put back, as a break test does), and
# change its own file for good; and start a worker script of its own (w.py, in run_case's
# files, as test_torch.py's torch_worker.py is), on the files as they are and swapped
CASES = """import os, subprocess, sys
from harness import check, run_case

W = os.path.join(os.path.dirname(os.path.abspath(__file__)), "w.py")


def start():
    return subprocess.run([sys.executable, os.path.abspath(__file__), "worker"]).returncode


def spawn(d, port):
    check(start() == 0, "spawn: the worker failed")


def swap(d, port):
    with open(__file__) as f:
        text = f.read()
    with open(__file__, "a") as f:
        f.write("# swapped")
    rc = start()
    with open(__file__, "w") as f:
        f.write(text)
    check(rc == 0, "swap: the worker failed")


def edit(d, port):
    with open(__file__, "a") as f:
        f.write("# edited")


def own(d, port):
    check(subprocess.run([sys.executable, W]).returncode == 0, "own: the worker failed")


def own_swap(d, port):
    with open(W) as f:
        text = f.read()
    with open(W, "a") as f:
        f.write("# swapped")
    rc = subprocess.run([sys.executable, W]).returncode
    with open(W, "w") as f:
        f.write(text)
    check(rc == 0, "own_swap: the worker failed")


sys.exit(run_case({"spawn": spawn, "swap": swap, "edit": edit, "own": own, "own_swap": own_swap},
                  lambda: 0, files=[W], cleanup=lambda: print("cleanup ran")))
"""
OWN_WORKER = """import sys
import harness
sys.exit(1 if harness.worker_changed() else 0)
"""


def test_harness():
    """harness.run_case names a file changed under a run: a worker started on other files than
    its case fails, the script's own or one of its files, and so does a case whose files
    changed; one that changed nothing passes. Its cleanup runs after every case."""
    here = os.path.dirname(os.path.abspath(__file__))
    for case, rc, says in (("spawn", 0, None),
                           ("swap", 1, "t.py changed since the case that started this worker "
                                       "began"),
                           ("edit", 1, "t.py changed during the case"),
                           ("own", 0, None),
                           ("own_swap", 1, "w.py changed since the case that started this "
                                           "worker began")):
        with tempfile.TemporaryDirectory() as d:
            shutil.copy(os.path.join(here, "harness.py"), d)
            with open(os.path.join(d, "t.py"), "w") as f:
                f.write(CASES)
            with open(os.path.join(d, "w.py"), "w") as f:
                f.write(OWN_WORKER)
            r = subprocess.run([sys.executable, os.path.join(d, "t.py"), case],
                               capture_output=True, text=True, timeout=60)
        out = r.stdout + r.stderr
        print(f"harness: {case}: exit {r.returncode}, saying:")
        print("".join(f"  | {line}\n" for line in out.splitlines()), end="")
        check(r.returncode == rc and (says is None) == ("changed" not in out) and
              (says is None or says in out) and "cleanup ran" in r.stdout,
              f"harness: {case}: exit {r.returncode} (expected {rc}), saying {out[-2000:]!r}")


def test_kill_groups():
    """harness.kill_groups (test_torch.py's kill_all) kills a worker's process group: of a
    worker not reaped, the whole group; of one reaped, the processes of its group that started
    before the reap (a loader worker left behind), and not a process that leads a group of
    that id since (the worker's pid taken by another test's worker or a `timeout`)."""
    with tempfile.TemporaryDirectory() as d:
        member = os.path.join(d, "member")
        # a worker that leaves a process of its group behind as it ends
        w = subprocess.Popen(["sh", "-c", 'sleep 300 & echo $! > "$1"', "-", member],
                             start_new_session=True)
        w.wait()
        w.reaped = boot_ticks()
        with open(member) as f:
            m = int(f.read())
        m_start = group_and_start(m)[1]
        # a process that leads a group of its own, started after the reap: the worker's pid,
        # reused, is its group's id
        time.sleep(0.05)
        other = subprocess.Popen(["sleep", "300"], start_new_session=True)
        reused = subprocess.Popen(["true"])
        reused.wait()
        reused.pid, reused.reaped = other.pid, w.reaped
        hung = subprocess.Popen(["sleep", "300"], start_new_session=True)
        try:
            check(group_and_start(other.pid)[1] > w.reaped,
                  "the other process started no later than the reap: the check proves nothing")
            kill_groups([w, reused, hung])
            rc = hung.wait(timeout=10)
            check(rc == -9, "kill_groups: a worker not reaped was not killed")
            for _ in range(100):
                gs = group_and_start(m)
                if not gs or gs[1] != m_start:
                    break
                time.sleep(0.1)
            check(not gs or gs[1] != m_start,
                  "kill_groups: a process of a reaped worker's group was left running")
            alive = other.poll() is None
            check(alive, "kill_groups killed a group that took the id of a reaped worker's")
        finally:
            other.kill()
            other.wait()
            hung.kill()
            hung.wait()
            if group_and_start(m) and group_and_start(m)[1] == m_start:
                os.kill(m, 9)  # (it holds the test's output open)
    print(f"harness: kill_groups: the worker not reaped exited {rc}; what a reaped one left "
          f"{'runs' if gs and gs[1] == m_start else 'ended'}; the group that took its id "
          f"{'runs' if alive else 'was killed'}")


if __name__ == "__main__":
    if sys.argv[1] == "import":
        test_import()
    elif sys.argv[1] == "harness":
        test_harness()
        test_kill_groups()
    else:
        test_pip(sys.argv[2])
    sys.exit(finish())
