#!/usr/bin/env python3
"""PyTorch DDP (gloo, CPU) baseline for `hetring bench hetero`.

Trains the same MLP as the hetring bench with N local processes, a fixed global batch split
evenly (DDP has no dynamic batching), and the same sleep-based slowdown: after computing,
rank k sleeps (f_k - 1) times its measured compute time. Prints one JSON object:
{"nodes": N, "slowdowns": [...], "samples_per_s": median over repeats, "runs": [...]}.
Loopback only (127.0.0.1).
"""
import argparse, json, os, statistics, sys, time

def worker(rank, n, args, port, out_q):
    import torch, torch.distributed as dist
    torch.set_num_threads(args.threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    torch.manual_seed(1)
    sizes = [int(s) for s in args.layers.split(",")]
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    b = args.batch // n
    g = torch.Generator().manual_seed(rank)
    x = torch.rand(b, sizes[0], generator=g)
    y = torch.randint(0, sizes[-1], (b,), generator=g)
    lossf = torch.nn.CrossEntropyLoss()
    f = args.slowdowns[rank]
    t0 = None
    for it in range(args.warmup + args.iters):
        if it == args.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        c0 = time.perf_counter()
        opt.zero_grad()
        loss = lossf(model(x), y)
        loss.backward()  # DDP all-reduces gradient buckets during backward
        opt.step()
        c1 = time.perf_counter()
        if f > 1:
            time.sleep((f - 1) * (c1 - c0))
    dist.barrier()
    wall = time.perf_counter() - t0
    if rank == 0:
        out_q.put(args.iters * args.batch / wall)
    dist.destroy_process_group()

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
    args = ap.parse_args()
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
        for p in procs: p.join(timeout=600)
        if any(p.exitcode != 0 for p in procs):
            sys.exit("ddp_baseline: a worker failed")
        runs.append(q.get())
    print(json.dumps({"nodes": args.nodes, "slowdowns": args.slowdowns, "layers": args.layers,
                      "batch": args.batch, "samples_per_s": statistics.median(runs),
                      "runs": runs}))

if __name__ == "__main__":
    main()
