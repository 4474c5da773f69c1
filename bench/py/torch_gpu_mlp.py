#!/usr/bin/env python3
"""torch_gpu_mlp.py: the PyTorch eager reference for hetring's GPU training step.

Times forward, backward and an SGD-momentum step (lr 0.01, momentum 0.9, weight decay 5e-4,
summed cross-entropy) on cuda for the MLP 784,512,512,10, LeNet (28x28x1) and the small VGG
(32x32x3), the models of tests/cuda/cuda_train_bench. Like hetring's executor, each step copies
the batch from pinned host memory and reads the loss back (one sync per step); --resident
keeps the batch on the device instead. TF32 is off so both sides run plain fp32 GEMMs and
convolutions. Prints one JSON line per model.

usage: torch_gpu_mlp.py [--batch 512] [--iters 200] [--models mlp,lenet,vgg] [--resident]
"""
import argparse
import json
import statistics
import time

import torch


def build(name):
    nn = torch.nn
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10)), (784,)
    if name == "lenet":
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
                             nn.Linear(84, 10)), (1, 28, 28)
    if name == "vgg":
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(2048, 128), nn.ReLU(),
                             nn.Linear(128, 10)), (3, 32, 32)
    raise SystemExit(f"unknown model {name!r} (mlp, lenet, vgg)")


def run(name, batch, iters, resident):
    dev = torch.device("cuda")
    torch.manual_seed(1)
    model, shape = build(name)
    model = model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    x_host = torch.rand(batch, *shape).pin_memory()
    y_host = (torch.arange(batch) % 10).to(torch.int64).pin_memory()
    x_dev, y_dev = x_host.to(dev), y_host.to(dev)

    def step():
        if resident:
            x, y = x_dev, y_dev
        else:
            x = x_host.to(dev, non_blocking=True)
            y = y_host.to(dev, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(10):
        step()
    torch.cuda.synchronize()
    rates = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        torch.cuda.synchronize()
        rates.append(iters * batch / (time.perf_counter() - t0))
    return {"model": name, "batch": batch, "torch": torch.__version__,
            "device": torch.cuda.get_device_name(0), "resident": resident,
            "samples_per_s": statistics.median(rates)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--models", default="mlp,lenet,vgg")
    ap.add_argument("--resident", action="store_true")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        raise SystemExit(77)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    for name in a.models.split(","):
        print(json.dumps(run(name, a.batch, a.iters, a.resident)), flush=True)


if __name__ == "__main__":
    main()
