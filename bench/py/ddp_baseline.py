#!/usr/bin/env python3
"""PyTorch DDP (gloo, CPU) baseline for `hetring bench hetero`.

Trains the same MLP as the hetring bench with N local processes, a fixed global batch split
evenly (DDP has no dynamic batching), and the same sleep-based slowdown: after computing,
rank k sleeps (f_k - 1) times its measured compute time (forward and backward, without the
all-reduce). Prints one JSON object:
{"nodes": N, "slowdowns": [...], "hook": ..., "samples_per_s": median over repeats, "runs": [...]}.

--hook picks DDP's communication hook, as a user would to save bytes on a slow link: none
(fp32), fp16 or bf16 (torch's fp16_compress_hook, bf16_compress_hook; some torch versions
refuse bf16 without CUDA and NCCL, which the JSON's error says) or powersgd:R (torch's PowerSGD hook at rank R, with
its defaults: error feedback, warm start, 1000 uncompressed iterations first unless
--powersgd-start says otherwise). On 127.0.0.1, or with --netns PREFIX rank k runs in the
network namespace PREFIX-k that `hetring bench hetero --netns` made (10.77.0.(k+1), its veth
PREFIXvk), so that DDP crosses the same shaped links as hetring.
"""
import argparse, ctypes, json, os, statistics, sys, time

CLONE_NEWNET = 0x40000000


def enter_netns(prefix, rank):
    """Move this process into the network namespace PREFIX-rank (setns(2) through libc)."""
    path = f"/var/run/netns/{prefix}-{rank}"
    fd = os.open(path, os.O_RDONLY)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), f"setns {path}: {os.strerror(ctypes.get_errno())}")
    os.close(fd)


def register_hook(model, hook, start):
    """DDP's communication hook by name: none, fp16, bf16 or powersgd:R."""
    if hook == "none":
        return
    if hook in ("fp16", "bf16"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, getattr(default_hooks, f"{hook}_compress_hook"))
        return
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    state = ps.PowerSGDState(process_group=None, matrix_approximation_rank=int(hook.split(":")[1]),
                             start_powerSGD_iter=start)
    model.register_comm_hook(state, ps.powerSGD_hook)


def worker(rank, n, args, port, out_q):
    import torch, torch.distributed as dist
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    if args.netns:
        enter_netns(args.netns, rank)
        os.environ["MASTER_ADDR"] = "10.77.0.1"
        os.environ["GLOO_SOCKET_IFNAME"] = f"{args.netns}v{rank}"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    torch.manual_seed(1)
    sizes = [int(s) for s in args.layers.split(",")]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    net = torch.nn.Sequential(*layers)
    # the slowdown, as hetring emulates it: when the compute ends, rank k sleeps (f_k - 1) x that
    # compute's time before its last gradients go out. The compute ends when the gradient of the
    # first layer's weight (the last one backward computes) is ready; a hook on it sleeps there,
    # before DDP all-reduces the bucket that holds it. Timing the whole step instead would count
    # the waits for the others in the compute, and the sleeps would feed on each other.
    f = args.slowdowns[rank]
    started = [0.0]

    def stretch(grad):
        if f > 1:
            time.sleep((f - 1) * (time.perf_counter() - started[0]))

    net[0].weight.register_hook(stretch)
    if args.hook.startswith("powersgd:"):
        # one bucket: the PowerSGD hook runs a chain of all-reduces per bucket, and with gloo
        # two buckets' chains reach the ranks in different orders (a worker fails, "op.preamble
        # .length <= op.nbytes"); DDP's first bucket is 1 MiB whatever bucket_cap_mb says
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
    model = torch.nn.parallel.DistributedDataParallel(
        net, bucket_cap_mb=(1 << 20) if args.hook.startswith("powersgd:") else 25)
    try:
        register_hook(model, args.hook, args.powersgd_start)
    except Exception as e:  # e.g. a bf16 hook this torch refuses on the CPU
        if rank == 0:
            out_q.put(f"error: --hook {args.hook}: {type(e).__name__}: {e}")
        dist.destroy_process_group()
        return
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    b = args.batch // n
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(b, sizes[0], generator=g)
    y = torch.randint(0, sizes[-1], (b,), generator=g)
    lossf = torch.nn.CrossEntropyLoss()
    t0 = None
    for it in range(args.warmup + args.iters):
        if it == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        opt.zero_grad()
        started[0] = time.perf_counter()
        loss = lossf(model(x), y)
        loss.backward()  # DDP all-reduces gradient buckets during backward; stretch sleeps
        opt.step()
    dist.barrier()
    wall = time.perf_counter() - t0
    if rank == 0:
        out_q.put(args.iters * args.batch / wall)
    dist.destroy_process_group()

def wait_all(procs, limit):
    """Join the workers; when one fails, or after `limit` seconds, stop the others at once: a
    rank whose peer died waits in gloo's collective with no deadline of its own."""
    end = time.monotonic() + limit
    while any(p.is_alive() for p in procs):
        if time.monotonic() > end or any(p.exitcode not in (None, 0) for p in procs):
            for p in procs:
                if p.is_alive():
                    p.kill()
            for p in procs:
                p.join()
            return
        time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--layers", default="784,512,512,10")
    ap.add_argument("--batch", type=int, default=512, help="global batch")
    ap.add_argument("--slowdowns", default="1,1,1,1")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--port", type=int, default=29531)
    ap.add_argument("--hook", default="none",
                    help="DDP communication hook: none, fp16, bf16 or powersgd:R (default none)")
    ap.add_argument("--powersgd-start", type=int, default=2,
                    help="iterations before PowerSGD compresses (torch needs at least 2)")
    ap.add_argument("--netns", metavar="PREFIX",
                    help="rank k runs in the network namespace PREFIX-k (10.77.0.(k+1))")
    args = ap.parse_args()
    if not (args.hook in ("none", "fp16", "bf16") or
            (args.hook.startswith("powersgd:") and args.hook[9:].isdigit() and int(args.hook[9:]) > 0)):
        sys.exit(f"ddp_baseline: --hook {args.hook!r}: expected none, fp16, bf16 or powersgd:R (R >= 1)")
    if args.netns and not all(os.path.exists(f"/var/run/netns/{args.netns}-{k}")
                              for k in range(args.nodes)):
        sys.exit(f"ddp_baseline: --netns {args.netns}: /var/run/netns/{args.netns}-0.."
                 f"{args.nodes - 1} do not all exist")
    args.slowdowns = [float(s) for s in args.slowdowns.split(",")]
    if len(args.slowdowns) != args.nodes:
        sys.exit("ddp_baseline: --slowdowns needs one factor per node")
    import torch.multiprocessing as mp
    runs = []
    for r in range(args.repeats):
        ctx = mp.get_context("spawn")
        q = ctx.SimpleQueue()
        procs = [ctx.Process(target=worker, args=(k, args.nodes, args, args.port + r, q))
                 for k in range(args.nodes)]
        for p in procs: p.start()
        wait_all(procs, 600)
        got = q.get() if not q.empty() else None
        if isinstance(got, str):
            sys.exit(f"ddp_baseline: {got}")
        if any(p.exitcode != 0 for p in procs) or got is None:
            sys.exit("ddp_baseline: a worker failed")
        runs.append(got)
    print(json.dumps({"nodes": args.nodes, "slowdowns": args.slowdowns, "hook": args.hook,
                      "netns": bool(args.netns), "layers": args.layers,
                      "batch": args.batch, "samples_per_s": statistics.median(runs),
                      "runs": runs}))

if __name__ == "__main__":
    main()
