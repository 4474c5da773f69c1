#!/usr/bin/env python3
"""mnist_cnn.py: a PyTorch CNN on MNIST-format IDX files, one node of a hetring cluster.

    hetring gen-data --kind synthetic --out data        # or real MNIST files
    python3 mnist_cnn.py --conf cluster.ini --node 0 --data data   # and nodes 1, 2, 3

Every node runs this script with its own --node. hetring gives each node the indices of its
share of every global batch (a share that follows the node's measured speed), all-reduces the
gradients weighted by those shares, and keeps the replicas identical; the rest is the plain
PyTorch loop you know. The last line of each node is `RESULT {json}` (wall time, samples/s,
held-out accuracy, a hash of the final parameters).

SIGTERM, SIGINT (Ctrl-C) or SIGHUP makes a node leave the cluster at the next iteration
boundary, as `hetring run` does (the others go on without it; start it again and it rejoins
with their state). --checkpoint FILE resumes from
FILE when it exists and writes it when this node stops (at the end, or when it left).

--device cuda (or cuda:N) puts this node's model and batches on a GPU; hetring stages its
gradients through the host as float32, so GPU and CPU nodes can share one cluster.

--mode ddp runs the same model, global batch and emulated slowdowns with PyTorch
DistributedDataParallel over gloo instead (equal shares), for comparison (bench/torch_bench.sh).
"""
import argparse
import configparser
import gzip
import json
import os
import signal
import struct
import sys
import time

import torch
import torch.nn as nn

# ------------------------------------------------------------------ data and model

# How a node's compute is timed (the controller's speed signal and the emulated slowdown).
CLOCKS = {"cpu": time.thread_time, "wall": time.perf_counter}


def read_idx(path):
    """An IDX file (optionally .gz) as a uint8 tensor of its shape."""
    if not os.path.exists(path) and os.path.exists(path + ".gz"):
        path += ".gz"
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(shape)


def load_mnist(d):
    def images(name):
        return read_idx(os.path.join(d, name)).float().div_(255).unsqueeze(1)

    def labels(name):
        return read_idx(os.path.join(d, name)).long()

    return (images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte"),
            images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte"))


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 8, 5), nn.ReLU(), nn.MaxPool2d(2),   # (8, 12, 12)
        nn.Conv2d(8, 16, 5), nn.ReLU(), nn.MaxPool2d(2),  # (16, 4, 4)
        nn.Flatten(), nn.Linear(256, 64), nn.ReLU(), nn.Linear(64, 10))


def accuracy(model, x, y):
    dev = next(model.parameters()).device
    with torch.no_grad():
        return float((model(x.to(dev)).argmax(1) == y.to(dev)).float().mean())


def node_settings(conf, node, a):
    """[train] and this node's slowdown, read from the cluster file as hetring reads them, and
    the optimizer's settings from the command line (the library refuses [train] lr)."""
    ini = configparser.ConfigParser(inline_comment_prefixes=(";", "#"))
    ini.read(conf)
    tr = ini["train"]
    ids = sorted(int(s.split(".", 1)[1]) for s in ini.sections() if s.startswith("node."))
    return {"B": int(tr.get("global_batch")), "iterations": int(tr.get("iterations")),
            "seed": int(tr.get("seed", "1")), "lr": a.lr,
            "momentum": a.momentum, "nodes": ids,
            "slowdown": float(ini[f"node.{node}"].get("slowdown", "1")),
            "emulated": any(float(ini[f"node.{k}"].get("slowdown", "1")) != 1 for k in ids)}


# ------------------------------------------------------------------ hetring


def run_hetring(a, s, data):
    import hetring.torch as ht
    X, Y, Xt, Yt = data
    model = make_model().to(a.device)
    opt = torch.optim.SGD(model.parameters(), lr=s["lr"], momentum=s["momentum"])
    loss_fn = nn.CrossEntropyLoss()

    def on_view(v):
        if v["rank"] == 0:
            print(f"view {v['epoch']}: nodes {v['nodes']} from iteration {v['iter']}", flush=True)

    tr = ht.Trainer(a.conf, model, opt, node_id=a.node, n_samples=len(X), overrides=a.set,
                    on_view=on_view, clock=CLOCKS[a.clock], resume=a.checkpoint,
                    leave_on=(signal.SIGTERM, signal.SIGINT, signal.SIGHUP))
    t0, done, retries, comm, losses = None, 0, 0, 0.0, []
    for idx in tr.batches():
        if t0 is None:
            t0 = time.perf_counter()  # the clock starts once the cluster formed
        res = tr.step(loss_fn, (X[idx].to(a.device), Y[idx].to(a.device)))
        if res is None:
            retries += 1
            continue
        done += 1
        comm += res.t_comm
        losses.append(res.loss)
        if tr.node.rank == 0 and (res.iter % 20 == 0 or res.iter + 1 == tr.node.iterations):
            ms = tr.node.members()  # every node's batch and compute time in this iteration
            print(f"iter {res.iter:4d}  loss {res.loss:.4f}  acc {res.accuracy:.3f}  batches "
                  f"{'/'.join(str(b) for _, b, _ in ms)} of {tr.node.global_batch}  compute "
                  f"{'/'.join(f'{1e3 * t:.0f}' for _, _, t in ms)} ms", flush=True)
    wall = time.perf_counter() - (t0 or time.perf_counter())
    if tr.left:
        print(f"node {a.node} left the cluster after iteration {tr.done - 1}", flush=True)
    if a.checkpoint:
        tr.save(a.checkpoint)
    out = {"mode": "hetring", "left": tr.left, "node": a.node, "rank": tr.node.rank, "iterations": done,
           "retries": retries, "wall_s": wall, "samples_per_s": done * s["B"] / max(wall, 1e-9),
           "accuracy": accuracy(model, Xt, Yt), "final_loss": res.loss if done else None,
           "comm_s": comm, "hash": ht.param_hash(list(model.parameters())), "losses": losses,
           "emulated": s["emulated"], "device": str(next(model.parameters()).device)}
    tr.close()
    if a.save:
        torch.save(model.state_dict(), a.save)
    return out


# ------------------------------------------------------------------ DDP (gloo), for comparison


def run_ddp(a, s, data):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    X, Y, Xt, Yt = data
    world, rank = len(s["nodes"]), s["nodes"].index(a.node)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.ddp_port}", rank=rank,
                            world_size=world)
    torch.manual_seed(s["seed"])
    model = make_model().to(a.device)
    loss_fn = nn.CrossEntropyLoss()
    B, b = s["B"], s["B"] // world
    # a node `slowdown` times slower, as hetring emulates it: when its compute ends, it sleeps
    # (slowdown - 1) x that compute's time before its gradients go out. The compute ends when
    # the gradient of the first layer's weight (the last one backward computes) is ready; a
    # hook on it sleeps there, before DDP all-reduces the bucket that holds it.
    clock = CLOCKS[a.clock]
    started = [0.0]

    def stretch(grad):
        if s["slowdown"] > 1:
            time.sleep((s["slowdown"] - 1) * (clock() - started[0]))

    next(model.parameters()).register_hook(stretch)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=s["lr"], momentum=s["momentum"])
    ipe = len(X) // B
    dist.barrier()
    t0 = time.perf_counter()
    for it in range(s["iterations"]):
        e, i = divmod(it, ipe)
        perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(s["seed"] + e))
        idx = perm[i * B + rank * b:i * B + (rank + 1) * b]
        opt.zero_grad()
        started[0] = clock()
        loss = loss_fn(ddp(X[idx].to(a.device)), Y[idx].to(a.device))
        loss.backward()
        opt.step()
        if rank == 0 and it % 20 == 0:
            print(f"iter {it:4d}  loss {float(loss):.4f}  (rank 0's share)", flush=True)
    wall = time.perf_counter() - t0
    out = {"mode": "ddp", "node": a.node, "rank": rank, "iterations": s["iterations"],
           "wall_s": wall, "samples_per_s": s["iterations"] * B / wall,
           "accuracy": accuracy(model, Xt, Yt), "emulated": s["emulated"]}
    dist.destroy_process_group()
    return out


def device_arg(text):
    try:
        return torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device (cpu, cuda or cuda:N)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--conf", required=True, help="the cluster's INI file")
    p.add_argument("--node", type=int, required=True, help="this process's [node.ID]")
    p.add_argument("--data", required=True, help="directory of MNIST IDX files")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a key of the INI (hetring mode)")
    p.add_argument("--mode", choices=["hetring", "ddp"], default="hetring")
    p.add_argument("--ddp-port", type=int, default=29600)
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum")
    p.add_argument("--threads", type=int, default=1, help="torch threads of this node")
    p.add_argument("--device", type=device_arg, default=torch.device("cpu"),
                   help="where this node's model and batches live: cpu (default), cuda or "
                        "cuda:N (hetring stages the gradients through the host as float32)")
    p.add_argument("--save", metavar="FILE", help="write the final state_dict (torch.save)")
    p.add_argument("--checkpoint", metavar="FILE",
                   help="resume from FILE when it exists; write it when this node stops")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="what times compute: wall seconds (default), or this thread's CPU "
                        "seconds, steadier where more processes share the cores than there are "
                        "(with --threads 1 only: other threads' work is not counted)")
    a = p.parse_args()
    if a.device.type == "cuda" and not torch.cuda.is_available():
        p.error(f"--device {a.device}: this PyTorch sees no CUDA device")
    if a.device.type not in ("cpu", "cuda"):
        p.error(f"--device {a.device}: only cpu and cuda devices are supported")
    torch.set_num_threads(a.threads)
    s = node_settings(a.conf, a.node, a)
    for kv in a.set:
        k, v = kv.split("=", 1)
        if k == "train.iterations":
            s["iterations"] = int(v)
    torch.manual_seed(s["seed"])
    data = load_mnist(a.data)
    out = run_hetring(a, s, data) if a.mode == "hetring" else run_ddp(a, s, data)
    if out["rank"] == 0:
        print(f"done: {out['iterations']} iterations in {out['wall_s']:.2f} s "
              f"({out['samples_per_s']:.0f} samples/s), held-out accuracy "
              f"{out['accuracy']:.4f}{' (emulated heterogeneity)' if out['emulated'] else ''}",
              flush=True)
    print("RESULT " + json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
