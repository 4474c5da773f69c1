#!/usr/bin/env python3
"""torch_mlp.py: the PyTorch reference for `hetring bench train`.

Times forward, backward and an SGD-momentum step of an MLP (ReLU between layers, softmax
cross-entropy) on random data, like hetring's training step. Prints one JSON line.
usage: torch_mlp.py LAYERS BATCH THREADS ITERS   (LAYERS as 784,512,512,10)
"""
import json
import os
import statistics
import sys

# torch.set_num_threads does not reach the BLAS that Debian's torch calls (OpenBLAS through
# libblas.so.3): without this, "1 thread" would run OpenBLAS on every core.
os.environ["OPENBLAS_NUM_THREADS"] = sys.argv[3]

import time  # noqa: E402

import torch  # noqa: E402

layers = [int(v) for v in sys.argv[1].split(",")]
batch, threads, iters = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.manual_seed(1)
mods = []
for i in range(1, len(layers)):
    mods.append(torch.nn.Linear(layers[i - 1], layers[i]))
    if i + 1 < len(layers):
        mods.append(torch.nn.ReLU())
model = torch.nn.Sequential(*mods)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x = torch.rand(batch, layers[0])
y = torch.randint(0, layers[-1], (batch,))
loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")


def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()


def rate(intra_op):
    """Median samples/s with `intra_op` torch threads (BLAS has `threads`)."""
    torch.set_num_threads(intra_op)
    for _ in range(5):
        step()
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        rates.append(iters * batch / (time.perf_counter() - t0))
    return statistics.median(rates)


# With T > 1, torch's own threads spin while OpenBLAS's run, so one intra-op thread is often
# faster: report PyTorch's best configuration.
results = {n: rate(n) for n in sorted({1, threads})}
best = max(results, key=results.get)
print(json.dumps({"torch": torch.__version__, "threads": threads, "intra_op_threads": best,
                  "samples_per_s": results[best],
                  "by_intra_op_threads": {str(k): v for k, v in results.items()}}))
