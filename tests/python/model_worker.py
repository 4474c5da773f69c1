"""model_worker.py: one node of the model tests (test_models.py): a model as users have them
(BatchNorm, Dropout, a frozen layer, tied weights, a branch, torchvision's ResNet-18) on
synthetic 3-channel images, or a small causal transformer on synthetic token sequences,
trained through hetring.torch. Prints 'RESULT {json}' at the end.

    model_worker.py CONF NODE_ID [--model cnn|resnet18|branch|transformer] [--buffers MODE]
                    [--sync-bn] [--opt sgd|adam] [--dropout P] [--clip NORM] [--sched] [--amp]
                    [--dtype T] [--die-at ITER] [--pace S] [--nodes N] [--set S.K=V]
                    [--nonfinite-at ITER [--nonfinite-all]]
"""
import argparse
import json
import math
import os
import sys
import time

import harness

if harness.worker_changed():  # the files its case started on changed: it would run other code
    sys.exit(1)

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import hetring.torch as ht  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("conf")
p.add_argument("node", type=int)
p.add_argument("--model", default="cnn", choices=["cnn", "resnet18", "branch", "transformer"])
p.add_argument("--buffers", default="average")
p.add_argument("--sync-bn", action="store_true")
p.add_argument("--opt", default="sgd", choices=["sgd", "adam"])
p.add_argument("--lr", type=float, default=0.05)
p.add_argument("--dropout", type=float, default=0.0)
p.add_argument("--size", type=int, default=16, help="image side")
p.add_argument("--samples", type=int, default=512)
p.add_argument("--clip", type=float, default=0.0, help="clip_grad_norm_ in before_step")
p.add_argument("--sched", action="store_true", help="a StepLR scheduler given to the Trainer")
p.add_argument("--amp", action="store_true", help="step() under torch.autocast('cpu', bf16)")
p.add_argument("--dtype", default="float32", help="the model's dtype")
p.add_argument("--die-at", type=int, default=-1)
p.add_argument("--pace", type=float, default=0.0,
               help="sleep per iteration while a node is missing")
p.add_argument("--nodes", type=int, default=1)
p.add_argument("--perturb-at", type=int, default=-1,
               help="node 1 adds 1e-3 to its last floating buffer in that iteration")
p.add_argument("--int-skew-at", type=int, default=-1,
               help="node 1's forward adds 1 more to its first num_batches_tracked then")
p.add_argument("--branch", default="iter", choices=["iter", "label"],
               help="Branchy takes its branch on even iterations (every node alike) or when "
                    "the node's first label is even (nodes differ)")
p.add_argument("--nonfinite-at", type=int, default=-1,
               help="transformer: node 1's forward puts +inf into its mask at [0, 0] then")
p.add_argument("--nonfinite-all", action="store_true",
               help="with --nonfinite-at: every node's forward puts -inf at the mask's [T-1, 0]")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--set", action="append", default=[], help="an INI override, section.key=value")
a = p.parse_args()

torch.manual_seed(1234 + a.node)  # differs per node: the first view's state transfer aligns them
torch.set_num_threads(a.threads)
g = torch.Generator().manual_seed(5)
N, S, C = a.samples, a.size, 10
Y = torch.randint(0, C, (N,), generator=g)
templates = torch.randn(C, 3, S, S, generator=g)
X = (0.5 * templates[Y] + torch.randn(N, 3, S, S, generator=g)) * 2.0 + 1.0  # mean 1, not 0
dtype = getattr(torch, a.dtype)
T, V = 8, 16  # the transformer's sequence length and vocabulary
if a.model == "transformer":  # token sequences, the class a function of the tokens
    X = torch.randint(0, V, (N, T), generator=g)
    Y = (X[:, 0] + X[:, -1]) % C


class Branchy(nn.Module):
    """Tied weights (the first layer and a later one share one matrix), a frozen layer, and a
    branch taken only in some iterations (--branch): its parameters get no gradient in the
    others, on every node or on some nodes and not others."""

    def __init__(self):
        super().__init__()
        d = 3 * S * S
        self.inp = nn.Linear(d, 32, bias=False)
        self.bn = nn.BatchNorm1d(32)
        self.frozen = nn.Linear(32, 32)
        self.frozen.requires_grad_(False)
        self.branch = nn.Linear(32, 32)
        self.mid = nn.Linear(32, d, bias=False)
        self.out = nn.Linear(d, 32, bias=False)
        self.out.weight = self.inp.weight  # tied: one parameter in two modules
        self.head = nn.Linear(32, C)

    def forward(self, x):
        h = torch.relu(self.bn(self.inp(x.flatten(1))))
        h = h + self.frozen(h)
        if x.shape[0] and int(self._key) % 2 == 0:
            h = h + torch.relu(self.branch(h))
        h = self.out(torch.tanh(self.mid(h)))
        return self.head(h)


class TinyTransformer(nn.Module):
    """Token and position embeddings, one block of causal self-attention (the mask a buffer of
    -inf above the diagonal, as transformer code registers it, and a learned bias that holds
    -inf there too: a parameter with inf in it) and an MLP, LayerNorm and Dropout; an int64
    count of training forwards; the class read from the last position."""

    def __init__(self, D=32):
        super().__init__()
        self.tok = nn.Embedding(V, D)
        self.pos = nn.Parameter(torch.randn(T, D) * 0.1)
        self.register_buffer("mask", torch.full((T, T), float("-inf")).triu(1))
        self.att_bias = nn.Parameter(torch.full((T, T), float("-inf")).triu(1))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.ln1, self.ln2, self.ln3 = nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
        self.drop = nn.Dropout(a.dropout)
        self.head = nn.Linear(D, C)

    def forward(self, x):
        if self.training:
            self.steps.add_(1)
        h = self.tok(x) + self.pos
        q, k, v = self.qkv(self.ln1(h)).chunk(3, dim=-1)
        att = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1]) + self.mask + self.att_bias
        h = h + self.drop(self.proj(self.drop(att.softmax(-1)) @ v))
        h = h + self.drop(self.mlp(self.ln2(h)))
        return self.head(self.ln3(h)[:, -1])


def make_model():
    if a.model == "resnet18":
        import torchvision
        return torchvision.models.resnet18(num_classes=C)  # random weights, nothing downloaded
    if a.model == "branch":
        return Branchy()
    if a.model == "transformer":
        return TinyTransformer()
    return nn.Sequential(
        nn.BatchNorm2d(3),                                   # the inputs normalised
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(a.dropout), nn.Linear(16 * (S // 4) ** 2, 32), nn.ReLU(),
        nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, C))


model = make_model().to(dtype)
# a buffer state_dict leaves out, different on every node until the first view's transfer
model.register_buffer("extra", torch.randn(4, dtype=dtype), persistent=False)
if a.model == "cnn":
    model[13].requires_grad_(False)  # a frozen Linear
params = [q for q in model.parameters() if q.requires_grad]
opt = (torch.optim.Adam(params, lr=a.lr / 20) if a.opt == "adam"
       else torch.optim.SGD(params, lr=a.lr, momentum=0.9))
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=4, gamma=0.7) if a.sched else None
loss_fn = nn.CrossEntropyLoss()


def clip(tr):
    tr.clip_norm = float(torch.nn.utils.clip_grad_norm_(tr.model.parameters(), a.clip))


# only the options asked for: the defaults run on a hetring.torch without them too
kw = {"buffers": a.buffers} if a.buffers != "average" else {}
kw.update({"sync_bn": True} if a.sync_bn else {}, **({"scheduler": sched} if sched else {}),
          **({"before_step": clip} if a.clip else {}))
tr = ht.Trainer(a.conf, model, opt, node_id=a.node, n_samples=N, overrides=a.set, **kw)
tr.clip_norm = 0.0
losses, retries, iters, lrs, norms, shares, means = [], 0, 0, [], [], [], []
t_start = None
for idx in tr.batches():
    b = tr.batch
    if t_start is None:
        t_start = time.perf_counter()
    if b.iter == a.die_at:
        os._exit(3)
    if a.pace and (retries or b.size < a.nodes):
        time.sleep(a.pace)
    if a.model == "branch":
        model._key = b.iter if a.branch == "iter" else (Y[idx[0]] if len(idx) else 1)
    if b.iter == a.int_skew_at and a.node == 1:
        nbt = [t for n, t in model.named_buffers() if n.endswith("num_batches_tracked")][0]
        def count_one_more(*_):
            nbt.add_(1)
            skew.remove()
        skew = model.register_forward_hook(count_one_more)
    if b.iter == a.perturb_at and a.node == 1:
        with torch.no_grad():
            [t for t in model.buffers() if t.dtype.is_floating_point][-1].add_(1e-3)
    if b.iter == a.nonfinite_at and (a.nonfinite_all or a.node == 1):
        def nonfinite(*_):
            with torch.no_grad():
                if a.nonfinite_all:
                    model.mask[T - 1, 0] = float("-inf")
                else:
                    model.mask[0, 0] = float("inf")
            once.remove()
        once = model.register_forward_hook(nonfinite)
    xb = X[idx].to(dtype) if X.dtype.is_floating_point else X[idx]
    if a.amp:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            res = tr.step(loss_fn, (xb, Y[idx]))
    else:
        res = tr.step(loss_fn, (xb, Y[idx]))
    if res is None:
        retries += 1
        continue
    iters += 1
    losses.append(res.loss)
    lrs.append(opt.param_groups[0]["lr"])
    norms.append(tr.clip_norm)
    shares.append(b.batch)
    if xb.dim() == 4 and len(xb):  # this node's batch means per channel (the input BatchNorm's)
        means.append(xb.double().mean((0, 2, 3)).tolist())
wall = time.perf_counter() - (t_start or time.perf_counter())
tensors = {}
for name, t in list(model.named_parameters()) + list(model.named_buffers()):
    flat = t.detach().double().reshape(-1)
    tensors[name] = {"hash": ht.param_hash([t]), "dtype": str(t.dtype).split(".")[-1],
                     "values": flat.tolist() if flat.numel() <= 4096 else None}
model.eval()
with torch.no_grad():
    xe = X[:128].to(dtype) if X.dtype.is_floating_point else X[:128]
    acc = float((model(xe).argmax(1) == Y[:128]).float().mean())
out = {"node": a.node, "iters": iters, "retries": retries, "losses": losses, "lrs": lrs,
       "norms": norms, "tensors": tensors, "views": tr.views,
       "staged": tr.staged is not None, "wall_s": wall, "shares": shares, "means": means,
       "samples_per_s": iters * tr.node.global_batch / max(wall, 1e-9), "eval_acc": acc,
       "n_params": len(list(model.parameters())), "trained": len(tr.params),
       "unique": len({id(q) for q in tr.params})}
tr.close()
print("RESULT " + json.dumps(out))
