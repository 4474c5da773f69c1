#!/usr/bin/env python3
"""Gloo all-reduce baseline for `hetring bench allreduce` (PyTorch torch.distributed, CPU).

Spawns N local processes that join one gloo process group over loopback (127.0.0.1 and the
lo interface only), all-reduce (sum) a float32 tensor of --bytes bytes and print one line in
the nccl-tests format that `hetring bench allreduce` prints:

    size (B)  count (elements)  type  redop  time (us)  algbw (GB/s)  busbw (GB/s)  #wrong

measured the same way: the tensor is filled with rank-dependent small integers
((i mod 251) + rank), all-reduced once and checked for the exact sum (#wrong counts the
elements that differ on any rank); then --warmup untimed and --iters timed all-reduces (at
least 200 below 1 MiB, as hetring does; the tensor is zeroed every 16 iterations so that the values stay finite, as hetring does). time is
the slowest rank's mean per all-reduce, algbw = bytes / time, busbw = algbw * 2(N-1)/N, GB = 1e9
bytes.

Needs a Python with torch (Debian's python3-torch: /usr/bin/python3). Example:

    /usr/bin/python3 bench/py/gloo_allreduce.py --nodes 4 --bytes 64M
    /usr/bin/python3 bench/py/gloo_allreduce.py --nodes 2 --bytes 4 --iters 5000 --json -
"""
import argparse, json, os, random, socket, sys, time


def parse_bytes(s):
    """'64M' -> 67108864 (K, M, G are powers of 1024, as in hetring)."""
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B") or "0"
    if s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def free_port():
    """A random port in 10000-32000 that nothing on 127.0.0.1 listens on right now."""
    for _ in range(100):
        p = random.randint(10000, 32000)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise SystemExit("gloo_allreduce: no free port in 10000-32000")


def worker(rank, n, args, port, out_q):
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(args.threads)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=n)
        count = max(1, args.bytes // 4)
        idx = torch.arange(count, dtype=torch.int64) % 251
        buf = (idx + rank).to(torch.float32)
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        want = (idx * n + n * (n - 1) // 2).to(torch.float32)
        wrong = torch.tensor([float((buf != want).sum().item())], dtype=torch.float64)
        del idx, want
        iters = 200 if count * 4 < (1 << 20) and args.iters < 200 else args.iters  # as hetring
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        dist.barrier()
        t0 = time.perf_counter()
        for it in range(iters):
            if it % 16 == 0:
                buf.zero_()  # keep the values finite
            dist.all_reduce(buf)
        mean_us = torch.tensor([(time.perf_counter() - t0) / iters * 1e6],
                               dtype=torch.float64)
        dist.all_reduce(mean_us, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong, op=dist.ReduceOp.SUM)
        if rank == 0:
            out_q.put(("ok", count, mean_us.item(), wrong.item(), iters))
        dist.destroy_process_group()
    except Exception as e:  # report instead of hanging the parent
        out_q.put(("error", rank, repr(e)))
        raise


def parse_args():
    """The command line."""
    ap = argparse.ArgumentParser(
        description=__doc__,
        epilog="Output: a commented header, then one nccl-tests line; with --json, also a JSON "
               "object {nodes, bytes, count, iters, warmup, time_us, algbw, busbw, wrong}. "
               "Exit status 1 when #wrong > 0, 2 on a failure.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=2, help="processes (default 2)")
    ap.add_argument("--bytes", type=parse_bytes, default=64 << 20,
                    help="tensor size in bytes, K/M/G suffixes (default 64M; float32, so it is "
                         "rounded down to a multiple of 4, at least 4)")
    ap.add_argument("--iters", type=int, default=20,
                    help="timed all-reduces (default 20; at least 200 below 1 MiB, as in "
                         "hetring bench allreduce)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed all-reduces (default 3)")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads per process (default 1)")
    ap.add_argument("--port", type=int, default=0,
                    help="rendezvous TCP port on 127.0.0.1 (default: random in 10000-32000)")
    ap.add_argument("--json", metavar="FILE",
                    help="also write the result as one JSON object to FILE ('-': stdout)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="seconds before giving up on the processes (default 600)")
    args = ap.parse_args()
    if args.nodes < 1 or args.iters < 1 or args.warmup < 0 or args.bytes < 1:
        ap.error("need --nodes >= 1, --iters >= 1, --warmup >= 0, --bytes >= 1")
    return args


def report(args, torch_version, count, t_us, wrong, iters):
    """The nccl-tests table, and the JSON object with --json."""
    nbytes = count * 4
    n = args.nodes
    algbw = nbytes / (t_us * 1e-6) / 1e9
    busbw = algbw * 2.0 * (n - 1) / n
    print(f"# gloo all-reduce (torch {torch_version}): {n} processes on loopback, "
          f"{iters} iterations, {args.warmup} warm-up, {args.threads} thread(s) each")
    print("#\n# %10s %12s %8s %6s %11s %8s %8s %7s" %
          ("size", "count", "type", "redop", "time", "algbw", "busbw", "#wrong"))
    print("# %10s %12s %8s %6s %11s %8s %8s %7s" %
          ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", ""))
    print("  %10d %12d %8s %6s %11.1f %8.3f %8.3f %7.0f" %
          (nbytes, count, "float", "sum", t_us, algbw, busbw, wrong))
    sys.stdout.flush()
    if args.json:
        obj = {"impl": "gloo", "nodes": n, "bytes": nbytes, "count": count, "iters": iters,
               "warmup": args.warmup, "time_us": t_us, "algbw": algbw, "busbw": busbw,
               "wrong": wrong}
        if args.json == "-":
            print(json.dumps(obj))
        else:
            with open(args.json, "w") as f:
                f.write(json.dumps(obj) + "\n")


def main():
    args = parse_args()
    try:
        import torch  # noqa: F401  (fail early, in the parent, when torch is missing)
        import torch.distributed as dist
        import torch.multiprocessing as mp
    except ImportError as e:
        print(f"gloo_allreduce: torch is not importable by {sys.executable}: {e}",
              file=sys.stderr)
        return 2
    if not dist.is_available() or not dist.is_gloo_available():
        print("gloo_allreduce: this torch has no gloo backend", file=sys.stderr)
        return 2

    # loopback only: gloo's transport binds to the lo interface, rendezvous on 127.0.0.1
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    port = args.port or free_port()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args.nodes, args, port, q))
             for r in range(args.nodes)]
    for p in procs:
        p.start()
    try:
        res = q.get(timeout=args.timeout)
    except Exception:
        res = ("error", -1, "timed out")
    for p in procs:
        p.join(timeout=30 if res[0] == "ok" else 2)
        if p.is_alive():
            p.terminate()
            p.join()
    if res[0] != "ok":
        print(f"gloo_allreduce: rank {res[1]} failed: {res[2]}", file=sys.stderr)
        return 2
    _, count, t_us, wrong, iters = res
    report(args, torch.__version__, count, t_us, wrong, iters)
    return 1 if wrong > 0 else 0

if __name__ == "__main__":
    sys.exit(main())
