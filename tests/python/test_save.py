"""test_save.py: Trainer.save writes its checkpoint as base/hr_file.c writes every file the
project replaces (hetring.torch._write_replace, without a cluster).

    test_save.py name     the file is written under PATH.tmp.PID.TAG (TAG 8 hex digits) and
                          renamed over PATH, which then holds the data; nothing else is left
    test_save.py fsync    the temporary file is fsynced before the rename and the directory
                          after it (os.fsync and os.replace recorded in order)
    test_save.py stale    a save removes PATH.tmp.PID.TAG of this namespace and PATH.tmp.PID
                          whose process is gone, and keeps those of a process that runs, of
                          another namespace (named in an INFO line) and names that are not
                          temporary files of PATH
    test_save.py link     a PATH that is a symbolic link (relative, through a second one) is
                          kept, and the file it leads to is replaced; a loop of links is
                          refused with ELOOP and nothing written
    test_save.py fifo     resuming from a FIFO (or any file that is not a regular one) is
                          refused at once with a message naming it, not waited on in open()
    test_save.py ctag HR  the tag is the C library's: `HR keygen --force` (hr_file_remove_stale)
                          removes a dead writer's file named with the Python tag, and keeps one
                          named with another tag, so neither side can drift from the other

Exits 77 (skipped) where the interpreter has no torch.
"""
import errno
import logging
import os
import signal
import subprocess
import sys
import tempfile

try:
    import hetring.torch as ht
except ImportError as e:
    if getattr(e, "name", None) != "torch":
        raise
    print(f"skipped: torch is not installed for {sys.executable}")
    sys.exit(77)

fails = 0


def check(ok, what):
    global fails
    if not ok:
        fails += 1
        print(f"FAIL: {what}")


def dead_pid():
    """A process id no process has now: a child's, after it was reaped."""
    while True:
        p = subprocess.Popen(["true"])
        p.wait()
        try:
            os.kill(p.pid, 0)
        except ProcessLookupError:
            return p.pid


def test_name(d):
    path = os.path.join(d, "run.ckpt")
    seen = []
    real_open = open

    def spy(name, *a, **k):
        seen.append(name)
        return real_open(name, *a, **k)

    ht.open = spy  # the module's open: the name _write_replace writes under
    try:
        ht._write_replace(path, b"data")
    finally:
        del ht.open
    seen = [n for n in seen if os.path.dirname(n) == d]  # not /proc's, read for the tag
    tag = seen[0].rpartition(".")[2] if seen else ""
    check(seen == [f"{path}.tmp.{os.getpid()}.{tag}"], f"written under {seen}")
    check(len(tag) == 8 and not tag.strip("0123456789abcdef"), f"tag {tag!r}: not 8 hex digits")
    check(tag == ht._ns_tag(), f"tag {tag!r} is not _ns_tag's {ht._ns_tag()!r}")
    with open(path, "rb") as f:
        check(f.read() == b"data", "the file does not hold the data")
    check(os.listdir(d) == ["run.ckpt"], f"left: {os.listdir(d)}")


def test_fsync(d):
    path = os.path.join(d, "run.ckpt")
    calls = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        calls.append(("fsync", (st.st_dev, st.st_ino)))
        return real_fsync(fd)

    def replace(a, b):
        calls.append(("replace", a))
        return real_replace(a, b)

    os.fsync, os.replace = fsync, replace
    try:
        ht._write_replace(path, b"data")
    finally:
        os.fsync, os.replace = real_fsync, real_replace
    st, dst = os.stat(path), os.stat(d)
    want = [("fsync", (st.st_dev, st.st_ino)), ("replace", ht._tmp_name(path)),
            ("fsync", (dst.st_dev, dst.st_ino))]
    check(calls == want, f"calls {calls}, not {want} (file fsync, rename, directory fsync)")


def test_stale(d):
    path = os.path.join(d, "run.ckpt")
    tag, dead = ht._ns_tag(), dead_pid()
    other = "0" * 8 if tag != "0" * 8 else "1" * 8
    gone = [f"run.ckpt.tmp.{dead}.{tag}", f"run.ckpt.tmp.{dead}"]
    kept = [f"run.ckpt.tmp.{os.getppid()}.{tag}", f"run.ckpt.tmp.{dead}.{other}",
            f"run.ckpt.tmp.{dead}.{tag.upper()}x", f"run.ckpt.tmp.{dead}.zzzzzzzz",
            f"run.ckpt.tmp.x{dead}", f"other.ckpt.tmp.{dead}.{tag}", f"run.ckpt.tmp.{dead}.{tag}.x"]
    for n in gone + kept:
        open(os.path.join(d, n), "w").close()
    lines = []

    class Keep(logging.Handler):
        def emit(self, r):
            lines.append(r.getMessage())

    log = logging.getLogger("hetring.torch")
    h = Keep()
    log.addHandler(h)
    log.setLevel(logging.INFO)
    try:
        ht._write_replace(path, b"data")
    finally:
        log.removeHandler(h)
    left = set(os.listdir(d))
    check(left == set(kept) | {"run.ckpt"}, f"left {sorted(left)}, not {sorted(kept)} + run.ckpt")
    for n in gone:
        check(any(f"removed {os.path.join(d, n)}, left by an interrupted checkpoint save of "
                  f"process {dead}" in m for m in lines), f"no INFO line removing {n}: {lines}")
    check(any(f"kept {os.path.join(d, kept[1])}: the temporary file of a checkpoint save from "
              "another container or machine" in m for m in lines),
          f"no INFO line keeping {kept[1]}: {lines}")


def test_link(d):
    os.mkdir(os.path.join(d, "sub"))
    path = os.path.join(d, "run.ckpt")
    os.symlink("hop", path)
    os.symlink("sub/real.ckpt", os.path.join(d, "hop"))
    ht._write_replace(path, b"data")
    check(os.path.islink(path) and os.readlink(path) == "hop", "the link was replaced")
    with open(os.path.join(d, "sub", "real.ckpt"), "rb") as f:
        check(f.read() == b"data", "the file the links lead to does not hold the data")
    check(sorted(os.listdir(d)) == ["hop", "run.ckpt", "sub"] and
          os.listdir(os.path.join(d, "sub")) == ["real.ckpt"],
          f"left: {sorted(os.listdir(d))}, sub: {os.listdir(os.path.join(d, 'sub'))}")
    loop = os.path.join(d, "loop")
    os.symlink("loop", loop)
    try:
        ht._write_replace(loop, b"data")
        check(False, "a loop of links was written")
    except OSError as e:
        check(e.errno == errno.ELOOP, f"a loop of links: {e}, not ELOOP")
    check(os.path.islink(loop) and os.readlink(loop) == "loop", "the looping link was replaced")


def test_fifo(d):
    path = os.path.join(d, "run.ckpt")
    os.mkfifo(path)
    t = ht.Trainer.__new__(ht.Trainer)  # _load alone: no model, no node
    signal.alarm(60)  # a hang in open() fails here instead of at the ctest timeout
    try:
        t._load(path)
        check(False, "a FIFO was taken as a checkpoint")
    except ValueError as e:
        want = f"hetring.torch: checkpoint {path}: not a regular file"
        check(str(e).startswith(want), f"a FIFO: {e!r}, not {want!r}")
    signal.alarm(0)


def test_ctag(d, hr):
    path = os.path.join(d, "n0.key")
    dead = dead_pid()
    tag = ht._ns_tag()
    other = f"{int(tag, 16) ^ 1:08x}"
    ours, theirs = f"{path}.tmp.{dead}.{tag}", f"{path}.tmp.{dead}.{other}"
    for n in (ours, theirs):
        open(n, "w").close()
    r = subprocess.run([hr, "keygen", "--out", path, "--force"], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 0, f"keygen: exit {r.returncode}: {r.stderr}")
    check(not os.path.exists(ours), f"the C library kept {ours}: its tag is not {tag}")
    check(os.path.exists(theirs), f"the C library removed {theirs}: its tag is {other}?")


def main():
    mode = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        if mode == "ctag":
            test_ctag(d, sys.argv[2])
        else:
            modes = {"name": test_name, "fsync": test_fsync, "stale": test_stale,
                     "link": test_link, "fifo": test_fifo}
            modes[mode](d)
    print("FAIL" if fails else "PASS")
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
