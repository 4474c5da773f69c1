"""test_torch.py: hetring.torch on loopback clusters of torch_worker.py processes.

    test_torch.py split     a 3-node run (slowdowns 1, 2, 3, proportional controller, batches
                            from a DataLoader over Trainer.sampler()) ends
                            with the parameters of a 1-node run of the same seed and global
                            batch, within float32 summation drift (the largest difference is
                            printed), and bitwise-equal replicas (I3, I4)
    test_torch.py workers   the same with Trainer.loader's worker processes; a DataLoader with
                            workers over sampler() stops with a clear error on every node
    test_torch.py overlap   split with bucket_bytes = 256 (two buckets: the last layer's, then
                            the first layer's with the stats): every iteration of every node
                            runs in 2 all-reduces, one of them sent by the backward hooks
                            while backward went on, and the parameters still match the 1-node
                            run's (which hands its gradients over after backward)
    test_torch.py dtype     the same with float64 parameters, which go through hetring.torch's
                            float32 staging buffer: still float64 at the end, replicas equal
                            (with those two buckets, sent from the hooks through the buffer)
    test_torch.py rejoin    node 2 dies inside iteration 10, the others retry it as two, node 2
                            starts again and joins with the model and optimizer state moved
                            through hetring.torch's state_bytes; every node ends identical
                            (buckets in flight when the all-reduce fails, bucket_bytes = 256);
                            every node loads through Trainer.loader's workers, and none of
                            them outlives its node
    test_torch.py resume    a run resumed from a torch.save checkpoint of iteration 15
                            (start_iter): node 2, which resumed nothing, receives the state, and
                            the run ends with the uninterrupted run's parameters; Node.members
                            gives every iteration's batches (Trainer.save, resume=); a file
                            that is no checkpoint is refused
    test_torch.py powersgd  split with [cluster] wire = powersgd at rank 2: the layer that
                            halves goes low-rank, replicas bitwise equal, the loss falls, and
                            the parameters differ from float32's (the wire took effect)
    test_torch.py resume_bf16  every node's error-feedback residual (wire = bf16) in its own
                            Trainer.save checkpoint: resumed from their own files the nodes end
                            with the uninterrupted run's parameters bit for bit; node 2 from
                            node 0's file leaves that residual, says so, and ends elsewhere
    test_torch.py resume_powersgd  the same with wire = powersgd, whose checkpoints also hold
                            Q (replicated: node 2 takes node 0's)
    test_torch.py leave     SIGTERM to node 2 (Trainer leave_on): it leaves at a boundary and
                            exits 0, the others finish as two without a retry; a child forked
                            after leave_on has the default SIGTERM handler (a loader worker
                            blocked on an inherited lock still ends on Pool.terminate)
Exit 77 when PyTorch is missing.
"""
import json
import os
import subprocess
import sys
import time

from harness import boot_ticks, check, kill_groups, need_torch, run_case

need_torch()

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torch_worker.py")


def write_ini(d, name, slowdowns, port, iters=30,
              controller="policy = proportional\ninterval = 1"):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write("[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = 10\n"
                "rejoin_timeout = 30\n[train]\nsamples = 512\nglobal_batch = 32\n"
                f"iterations = {iters}\nseed = 3\nhash_interval = 5\n[controller]\n"
                f"{controller}\nmin_batch = 2\n")
        for k, s in enumerate(slowdowns):
            f.write(f"[node.{k}]\nhost = 127.0.0.1\nport = {port + k}\nslowdown = {s}\n")
    return path


STARTED = []  # every worker started: killed (with its loader workers) when the test ends


def start(ini, node, d, *extra, worker=WORKER):
    """A worker process; its temporary files (PyTorch's pymp-* folders among them) go into the
    test's folder d, removed at the end even when the worker was killed."""
    out = open(os.path.join(d, f"n{node}.{time.monotonic_ns()}.log"), "w+")
    p = subprocess.Popen([sys.executable, worker, ini, str(node), *extra], stdout=out,
                         stderr=subprocess.STDOUT, start_new_session=True,
                         env=dict(os.environ, TMPDIR=d))
    p.log = out
    STARTED.append(p)
    return p


def kill_all():
    """No worker outlives the test, not even a hung one, nor its loader workers: their ports
    would be taken from the next test that claims them (harness.kill_groups: a reaped worker's
    pid may be another process's since)."""
    kill_groups(STARTED)


DEADLINE = time.monotonic() + 200  # before ctest's 240 s: a hung worker is reported and killed


def result(p, expect_rc=0):
    try:
        rc = p.wait(timeout=max(1.0, DEADLINE - time.monotonic()))
        p.reaped = boot_ticks()  # (kill_all)
    except subprocess.TimeoutExpired:
        rc = "a timeout"
    p.log.seek(0)
    text = p.log.read()
    check(rc == expect_rc, f"worker exited {rc}, expected {expect_rc}:\n{text[-3000:]}")
    for line in text.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return None


def max_diff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if a and b and len(a) == len(b) else float("nan")


def one_and_three(d, port, one_args=(), three_args=(), suffix=""):
    """A 1-node run, then a 3-node run (slowdowns 1, 2, 3) of the same seed and global batch:
    their results and the largest difference between their parameters, or (None, None, None)
    after a failed check where a run gave none."""
    one = result(start(write_ini(d, f"one{suffix}.ini", [1], port), 0, d, *one_args))
    ini = write_ini(d, f"three{suffix}.ini", [1, 2, 3], port + 1)
    rs = [result(p) for p in [start(ini, k, d, *three_args) for k in range(3)]]
    if not one or None in rs:
        check(False, "a run gave no result")
        return None, None, None
    return one, rs, max_diff(one["params"], rs[0]["params"])


def split(d, port):
    one, rs, diff = one_and_three(d, port, three_args=("--loader",))  # the DataLoader path
    if not one:
        return
    hashes = {r["hash"] for r in rs}
    check(len(hashes) == 1, f"the replicas differ: {hashes}")
    print(f"3 nodes vs 1 node after {one['iters']} iterations: final loss {rs[0]['last_loss']:.6f} "
          f"vs {one['last_loss']:.6f}, max abs parameter difference {diff:.3g}")
    check(diff <= 1e-4, f"3-node parameters differ from the 1-node run's by {diff}")
    check(rs[0]["last_loss"] < 0.6 * rs[0]["first_loss"], "the loss did not fall")
    check(all(r["iters"] == 30 for r in rs + [one]), "iterations")


def powersgd(d, port):
    """[cluster] wire = powersgd at rank 2 through hetring.torch, which declares each weight as
    a matrix: the first layer's (32 x 20) goes at rank 2, the second's (4 x 32) would not
    halve and goes as float32. The replicas stay bitwise equal, the loss falls, and the
    parameters differ from the float32 1-node run's (the wire took effect) but not by much."""
    psgd = ("--set", "cluster.wire=powersgd", "--set", "cluster.powersgd_rank=2")
    one = result(start(write_ini(d, "one.ini", [1], port), 0, d))
    ini = write_ini(d, "three.ini", [1, 2, 3], port + 1)
    ps = [start(ini, k, d, *psgd) for k in range(3)]
    rs = [result(p) for p in ps]
    if not one or None in rs:
        return check(False, "a run gave no result")
    ps[0].log.seek(0)
    log = ps[0].log.read()
    check("gradient path: powersgd" in log and
          "powersgd: 1 of 2 declared matrices at rank 2" in log,
          "node 0 does not say it sends its one worthy matrix at rank 2:\n" +
          "\n".join(line for line in log.splitlines() if "powersgd" in line or "path" in line))
    hashes = {r["hash"] for r in rs}
    check(len(hashes) == 1, f"the replicas differ: {hashes}")
    diff = max_diff(one["params"], rs[0]["params"])
    print(f"powersgd rank 2, 3 nodes vs the float32 1-node run after {one['iters']} iterations: "
          f"final loss {rs[0]['last_loss']:.4f} vs {one['last_loss']:.4f}, max abs parameter "
          f"difference {diff:.3g}")
    check(rs[0]["last_loss"] < 0.6 * rs[0]["first_loss"], "the loss did not fall")
    check(diff > 1e-4, f"the parameters are the float32 run's ({diff:.3g}): powersgd did not "
                       "take effect")
    check(rs[0]["last_loss"] < 2 * one["last_loss"] + 0.05,
          f"the final loss {rs[0]['last_loss']:.4f} is far above float32's {one['last_loss']:.4f}")


def workers(d, port):
    """Trainer.loader with 2 worker processes on a 3-node cluster ends with the parameters of a
    1-node run that reads its batches in the loop; a DataLoader with workers over sampler()
    (which prefetches ahead of step) stops with the error that says so, on every node."""
    one, rs, diff = one_and_three(d, port, three_args=("--workers", "2"))
    if not one:
        return
    check(len({r["hash"] for r in rs}) == 1, "the replicas differ")
    print(f"3 nodes loading with 2 workers each vs 1 node after {one['iters']} iterations: max abs "
          f"parameter difference {diff:.3g}")
    check(diff <= 1e-4, f"3-node parameters differ from the 1-node run's by {diff}")
    check(all(r["iters"] == 30 for r in rs), "iterations")
    ini = write_ini(d, "prefetch.ini", [1, 1], port + 4)
    ps = [start(ini, k, d, "--loader", "--workers", "2") for k in range(2)]
    for p in ps:
        result(p, expect_rc=4)
        p.log.seek(0)
        raised = [l for l in p.log.read().splitlines() if l.startswith("RAISED ")]
        check(raised and "fetched ahead" in raised[0] and "num_workers=0" in raised[0],
              f"the prefetching DataLoader: {raised}")
    print("a DataLoader with workers over sampler(): " + (raised[0][7:] if raised else "no error"))


BUCKETS = ("--set", "train.bucket_bytes=256")


def overlap(d, port):
    """Buckets sent from the backward hooks give the 1-node run's parameters."""
    one, rs, diff = one_and_three(d, port, one_args=("--no-overlap",), three_args=BUCKETS)
    if not one:
        return
    check(len({r["hash"] for r in rs}) == 1, "the replicas differ")
    print(f"3 nodes with buckets from the backward hooks vs 1 node after {one['iters']} "
          f"iterations: max abs parameter difference {diff:.3g}; all-reduces per iteration "
          f"{sorted(set(rs[0]['buckets']))}, sent during backward {sorted(set(rs[0]['early']))}")
    check(diff <= 1e-4, f"3-node parameters differ from the 1-node run's by {diff}")
    check(all(set(r["buckets"]) == {2} and set(r["early"]) == {1} for r in rs),
          f"all-reduces {[sorted(set(r['buckets'])) for r in rs]}, early "
          f"{[sorted(set(r['early'])) for r in rs]}: expected 2 and 1 in every iteration")
    check(set(one["early"]) == {0}, f"overlap=False sent {sorted(set(one['early']))} early")
    check(all(r["iters"] == 30 for r in rs), "iterations")


def dtype(d, port):
    """float64 parameters go through the float32 staging buffer: a 3-node run ends with the
    1-node run's parameters (within float32 drift: the all-reduce rounds to float32), still
    float64, with bitwise-equal replicas."""
    f64 = ("--dtype", "float64")
    one, rs, diff = one_and_three(d, port, one_args=f64, three_args=f64 + BUCKETS, suffix="64")
    if not one:
        return
    check(all(r["dtype"] == "float64" and r["staged"] for r in rs + [one]),
          f"dtypes {[r['dtype'] for r in rs]}, staged {[r['staged'] for r in rs]}")
    check(len({r["hash"] for r in rs}) == 1, "the float64 replicas differ")
    print(f"float64, 3 nodes vs 1 node after {one['iters']} iterations: final loss "
          f"{rs[0]['last_loss']:.6f} vs {one['last_loss']:.6f}, max abs parameter difference "
          f"{diff:.3g}")
    check(diff <= 1e-4, f"3-node float64 parameters differ from the 1-node run's by {diff}")
    check(rs[0]["last_loss"] < 0.6 * rs[0]["first_loss"], "the loss did not fall")
    check(all(set(r["early"]) == {1} for r in rs), "float64 buckets sent from the hooks: "
          f"{[sorted(set(r['early'])) for r in rs]}")


def rejoin(d, port):
    ini = write_ini(d, "rejoin.ini", [1, 1, 1], port, iters=60)
    # every node loads its batches with Trainer.loader's 2 forked workers: the iteration that
    # runs again after the view change gets its new indices, and node 2's workers, left
    # behind by its death, neither hold its port nor outlive it
    ws = ["--workers", "2", *BUCKETS]
    ps = [start(ini, k, d, "--pace", "0.2", "--nodes", "3", *ws,
                *(["--die-at", "10"] if k == 2 else [])) for k in range(3)]
    result(ps[2], expect_rc=3)
    time.sleep(0.3)
    ps[2] = start(ini, 2, d, "--pace", "0.2", "--nodes", "3", *ws)
    rs = [result(p) for p in ps]
    if None in rs:
        check(False, "a node gave no result")
        return
    check(len({r["hash"] for r in rs}) == 1, "the replicas differ after the rejoin")
    check(all(r["retries"] >= 1 for r in rs[:2]), f"retries {[r['retries'] for r in rs]}")
    joined = rs[2]["views"][0]
    print(f"node 2 rejoined at iteration {joined['iter']} with {joined['state_bytes']} state bytes; "
          f"views seen by node 0: {[(v['nodes'], v['iter']) for v in rs[0]['views']]}")
    check(joined["iter"] > 10 and joined["state_bytes"] > 1000, f"the joiner's view {joined}")
    seen = [(v["left"], v["joined"]) for v in rs[0]["views"][1:]]
    check(seen == [([2], []), ([], [2])], f"node 0's views after the first: {seen} (left, "
          f"joined), expected node 2 gone, then admitted")
    check(rs[2]["iters"] == 60 - joined["iter"], f"the joiner ran {rs[2]['iters']} iterations")
    left = []
    for _ in range(30):  # every loader worker ends with its node, within 3 s
        left = [p for p in os.listdir("/proc") if p.isdigit() and ini in _cmdline(p)]
        if not left:
            break
        time.sleep(0.1)
    check(not left, f"{len(left)} loader worker processes outlived their node")


def resume(d, port):
    """A run resumed from a checkpoint: nodes 0 and 1 load the model and optimizer that node 0
    saved after 15 of 30 iterations and pass start_iter = 15, node 2 starts from nothing and
    receives their state. The resumed run ends where the uninterrupted one did (within
    float32 drift: the controller starts the split afresh), and every iteration's members
    (Node.members) sum to the global batch."""
    ini = write_ini(d, "resume.ini", [1, 1, 1], port)
    ck = os.path.join(d, "ck.pt")
    full = [result(p) for p in [start(ini, k, d, *(["--save-at", "15", ck] if k == 0 else []))
                                for k in range(3)]]
    again = [result(p) for p in [start(ini, k, d, *(["--resume", ck] if k < 2 else []))
                                 for k in range(3)]]
    if None in full + again:
        check(False, "a run gave no result")
        return
    diff = max_diff(full[0]["params"], again[0]["params"])
    got = again[2]["views"][0]
    print(f"resumed at iteration {again[0]['first']} ({again[0]['iters']} iterations); node 2 "
          f"received {got['state_bytes']} state bytes; final parameters within {diff:.3g} of "
          f"the uninterrupted run's")
    check(all(r["first"] == 15 and r["iters"] == 15 for r in again),
          f"resumed runs began at {[r['first'] for r in again]}, ran {[r['iters'] for r in again]}")
    check(got["iter"] == 15 and got["state_bytes"] > 1000, f"node 2's first view {got}")
    check(all(r["done_at_open"] == 15 for r in again),
          f"Trainer.done once open: {[r['done_at_open'] for r in again]} (node 2 received the "
          f"state of iteration 15)")
    check(len({r["hash"] for r in again}) == 1, "the resumed replicas differ")
    check(diff <= 1e-4, f"the resumed run's parameters differ from the full run's by {diff}")
    ms = full[0]["members"] + again[1]["members"]
    bad = [m for m in ms if [i for i, _, _ in m] != [0, 1, 2] or
           sum(b for _, b, _ in m) != full[0]["global_batch"] or min(t for _, _, t in m) <= 0]
    check(len(ms) == 45 and not bad, f"{len(ms)} iterations' members, wrong ones: {bad[:3]}")
    check(all(r["done"] == 30 for r in again), f"Trainer.done {[r['done'] for r in again]}")
    with open(ck, "wb") as f:
        f.write(b"not a checkpoint")
    p = start(ini, 0, d, "--resume", ck)
    check(result(p, expect_rc=1) is None, "a run resumed from a file that is no checkpoint")
    p.log.seek(0)
    check("is not a checkpoint of Trainer.save" in p.log.read(), "the error names the file")


def resume_bf16(d, port, wire="bf16"):
    """The error-feedback residual in Trainer.save's checkpoints ([cluster] wire = bf16, static
    batches): every node saves its own after 15 of 30 iterations, and a run resumed by every
    node from its own file ends with the uninterrupted run's parameters, bit for bit (each
    node took its residual up again, and says so); node 2 resumed from node 0's file leaves
    that residual and says so, and the run then ends elsewhere (the residual carried weight).
    With wire = powersgd (resume_powersgd) the files also hold Q, which every node takes up,
    node 2 from node 0's file too (replicated state)."""
    # 12,804 floats: above what the ring sends as one small float32 message
    sets = ("--set", f"cluster.wire={wire}", "--hidden", "512")
    ini = write_ini(d, "resume.ini", [1, 1, 1], port, controller="policy = static")
    ck = [os.path.join(d, f"ck{k}.pt") for k in range(3)]
    full = [result(p) for p in [start(ini, k, d, *sets, "--save-at", "15", ck[k])
                                for k in range(3)]]
    ps = [start(ini, k, d, *sets, "--resume", ck[k]) for k in range(3)]
    again = [result(p) for p in ps]
    ps2 = [start(ini, k, d, *sets, "--resume", ck[0 if k == 2 else k]) for k in range(3)]
    other = [result(p) for p in ps2]
    if None in full + again + other:
        return check(False, "a run gave no result")
    logs = []
    for p in ps + ps2:
        p.log.seek(0)
        logs.append(p.log.read())
    took = [("resumed this node's error-feedback residual" in t) for t in logs]
    print(f"resumed from their own checkpoints: residual taken up {took[:3]}, final hash "
          f"{again[0]['hash']} against the uninterrupted {full[0]['hash']}; node 2 from node "
          f"0's: taken up {took[5]}, final hash {other[0]['hash']}")
    check(all(took[:3]), "a node did not take its residual up again")
    check(len({r["hash"] for r in full + again}) == 1,
          "the run resumed from its own checkpoints does not end with the uninterrupted run's "
          "parameters")
    check(not took[5] and "the checkpoint's error-feedback residual is node 0's, not this "
          "node's" in logs[5], "node 2 took up node 0's residual, or did not say it left it")
    check(other[0]["hash"] != full[0]["hash"],
          "without node 2's residual the run ends where it did with it: the residual carried "
          "nothing")
    if wire == "powersgd":
        took_q = [("resumed the powersgd Q from the checkpoint" in t) for t in logs]
        print(f"Q taken up: {took_q}")
        check(all(took_q), "a node did not take Q up (node 2 from node 0's file included)")


def resume_powersgd(d, port):
    """resume_bf16 with wire = powersgd: the residual and Q in every checkpoint."""
    resume_bf16(d, port, "powersgd")


def leave(d, port):
    """SIGTERM to node 2 (Trainer leave_on): it leaves at the next boundary, its batches() ends
    with .left set and it exits 0; nodes 0 and 1 finish the run as two without re-running an
    iteration, with equal parameters."""
    ini = write_ini(d, "leave.ini", [1, 1, 1], port)
    rs = [result(p) for p in [start(ini, k, d, *(["--term-at", "10"] if k == 2 else []))
                              for k in range(3)]]
    if None in rs:
        check(False, "a node gave no result")
        return
    print(f"node 2 left after {rs[2]['iters']} iterations (left={rs[2]['left']}); nodes 0 and 1 "
          f"ran {rs[0]['iters']} and {rs[1]['iters']} with {rs[0]['retries']} and "
          f"{rs[1]['retries']} retries; views of node 0: "
          f"{[(v['nodes'], v['iter']) for v in rs[0]['views']]}")
    check(rs[2]["left"] and 10 <= rs[2]["iters"] <= 12, f"node 2: {rs[2]['left']}, "
          f"{rs[2]['iters']} iterations")
    check(not rs[0]["left"] and rs[0]["iters"] == 30 and rs[1]["iters"] == 30,
          f"nodes 0 and 1 ran {rs[0]['iters']} and {rs[1]['iters']} iterations")
    check(rs[0]["retries"] == 0 and rs[1]["retries"] == 0, "a planned leave re-ran an iteration")
    check(rs[0]["hash"] == rs[1]["hash"], "nodes 0 and 1 differ")
    check(all(r["fork_default"] for r in rs), "a forked child kept leave_on's SIGTERM handler")
    last = rs[0]["views"][-1]
    check(last["nodes"] == [0, 1] and last["left"] == [2] and last["joined"] == [],
          f"the view after the leave: {last}")


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def main():
    return run_case({"split": split, "dtype": dtype, "rejoin": rejoin, "workers": workers,
                     "overlap": overlap, "resume": resume, "leave": leave,
                     "powersgd": powersgd, "resume_bf16": resume_bf16,
                     "resume_powersgd": resume_powersgd}, None, files=[WORKER],
                    cleanup=kill_all)


if __name__ == "__main__":
    sys.exit(main())
