"""hetring.torch: a PyTorch model and optimizer of your own on a hetring cluster.

    trainer = hetring.torch.Trainer("cluster.ini", model, optimizer, node_id=0,
                                    n_samples=len(train_set))
    for idx in trainer.batches():                   # this node's indices, iteration by iteration
        res = trainer.step(loss_fn, (X[idx], Y[idx]))
        if res is None:                              # the view changed: the iteration runs again
            continue
        print(res.iter, res.loss, res.next_batch)

or with a DataLoader: DataLoader(train_set, batch_sampler=trainer.sampler()) (num_workers=0:
the sampler asks the cluster for each iteration's indices when the loop needs them).

What step does: forward and backward on this node's b samples, the gradient scaled to the SUM
over them (loss_fn returns the mean, as PyTorch's losses do by default), an all-reduce of every
parameter's .grad weighted by batch size (the global mean over B samples, as one big batch
would give), the optimizer's step, and the replicated controller's next split from every
node's measured compute time. A node that joins receives the model's and the optimizer's
state (state_bytes / load_state_bytes), checked by a hash on every member.

Parameters may be of any floating type and on any device (a GPU's included). float32 CPU
gradients are all-reduced in place; any other kind goes through one float32 staging buffer on
the CPU (copied out before the all-reduce and back after it), so the all-reduce rounds them to
float32 on the way. On a GPU, the compute time is measured after torch.cuda.synchronize().
"""
import pickle
import time

import torch

import hetring

_INT_TYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)


def _pack(v):
    if torch.is_tensor(v):
        t = v.detach().cpu().contiguous()
        return ("tensor", str(t.dtype).split(".")[-1], tuple(t.shape), t.numpy().tobytes())
    return v


def _unpack(v):
    if isinstance(v, tuple) and len(v) == 4 and v[0] == "tensor":
        _, dtype, shape, data = v
        dt = getattr(torch, dtype)
        if not data:
            return torch.zeros(shape, dtype=dt)
        return torch.frombuffer(bytearray(data), dtype=dt).reshape(shape).clone()
    return v


def state_bytes(model, optimizer=None):
    """The model's and the optimizer's state as bytes, the same bytes for the same state."""
    m = [(k, _pack(v)) for k, v in model.state_dict().items()]
    o = None
    if optimizer is not None:
        sd = optimizer.state_dict()
        o = ([(k, [(n, _pack(v)) for n, v in s.items()]) for k, s in sd["state"].items()],
             sd["param_groups"])
    return pickle.dumps((m, o), protocol=4)


def load_state_bytes(model, optimizer, data):
    """Adopt a state that state_bytes made (on a model and optimizer of the same shape)."""
    m, o = pickle.loads(data)
    model.load_state_dict({k: _unpack(v) for k, v in m})
    if optimizer is not None and o is not None:
        st, groups = o
        optimizer.load_state_dict({"state": {k: {n: _unpack(v) for n, v in s} for k, s in st},
                                   "param_groups": groups})


def param_hash(params):
    """hetring_hash over the bytes of every parameter, in order (copied to the CPU first)."""
    h = 0
    for p in params:
        t = p.detach()
        if t.device.type != "cpu" or not t.is_contiguous():
            t = t.to("cpu").contiguous()
        h = hetring.hash_bytes(t.data_ptr(), t.numel() * t.element_size(), h)
    return h


class Sampler(torch.utils.data.Sampler):
    """A batch_sampler: this node's indices of each iteration, asked of the cluster lazily."""

    def __init__(self, trainer):
        self.trainer = trainer

    def __iter__(self):
        return (idx.tolist() for idx in self.trainer.batches())

    def __len__(self):
        return self.trainer.node.iterations


class Trainer:
    """A model and its optimizer, trained as one node of the cluster in `conf` (an INI file,
    or a mapping of its sections as hetring.Node takes).

    node_id, n_samples, overrides, sync_first: as hetring.Node. on_view(dict): called when a
    view is installed (nodes left or joined); every event is also kept in .views.
    clock: the seconds counter that times each node's compute for the controller (default
    time.perf_counter; time.thread_time counts only this thread's CPU, which keeps the speed
    signal steady on a machine whose cores are shared by more processes than it has).
    """

    def __init__(self, conf, model, optimizer, node_id=None, n_samples=0, overrides=(),
                 on_view=None, sync_first=True, clock=time.perf_counter):
        self.model, self.optimizer = model, optimizer
        self.clock = clock
        self.params = [p for p in model.parameters() if p.requires_grad]
        for p in self.params:
            if not p.dtype.is_floating_point:
                raise ValueError(f"hetring.torch: parameters must be floating point, one is "
                                 f"{p.dtype}")
        # float32 CPU gradients are all-reduced in place; anything else through `staged`, one
        # float32 CPU buffer with a view per parameter (the same buffers, in number and size,
        # as in place: nodes with and without a GPU can share a cluster)
        self.staged = None
        if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in self.params):
            self.staged = torch.zeros(sum(p.numel() for p in self.params), dtype=torch.float32)
        self._cuda = any(p.device.type == "cuda" for p in self.params)
        self.views = []
        self._user_view = on_view
        self.batch = None  # the hetring.Batch being computed
        self.node = hetring.Node(conf, node_id=node_id, n_samples=n_samples,
                                 overrides=overrides, sync_first=sync_first,
                                 get_state=lambda: state_bytes(self.model, self.optimizer),
                                 put_state=self._put, on_view=self._on_view)

    def _put(self, data):
        with torch.no_grad():
            load_state_bytes(self.model, self.optimizer, data)

    def _on_view(self, v):
        self.views.append(v)
        if self._user_view:
            self._user_view(v)

    def batches(self):
        """This node's indices (a LongTensor) for each iteration until the run is done."""
        while True:
            b = self.node.next()
            if b is None:
                return
            self.batch = b
            yield torch.tensor(b.indices, dtype=torch.long)

    def sampler(self):
        return Sampler(self)

    def step(self, loss_fn, batch):
        """One iteration on batch = (inputs, targets) of this node's indices.

        Returns the hetring Result (loss and accuracy over the global batch, this node's
        next batch size, its compute and communication seconds), or None when the view
        changed during the all-reduce: the iteration must run again (batches() gives its new
        indices), and nothing was applied.
        """
        b = self.batch
        if b is None:
            raise RuntimeError("hetring.torch: step() without a batch from batches()")
        self.batch = None
        x, y = batch
        self.optimizer.zero_grad(set_to_none=False)
        t0 = self.clock()
        loss_sum, correct = 0.0, 0
        if b.batch > 0:
            out = self.model(x)
            loss = loss_fn(out, y)
            (loss * b.batch).backward()  # the mean over b samples, as their sum
            loss_sum = float(loss.detach()) * b.batch
            if y.dtype in _INT_TYPES and out.dim() == 2:
                correct = int((out.detach().argmax(1) == y).sum())
        if self._cuda:
            torch.cuda.synchronize()  # the compute time includes the kernels still queued
        compute_s = self.clock() - t0
        bufs, views, off = [], [], 0
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            if self.staged is None:
                bufs.append((p.grad.data_ptr(), p.grad.numel()))
                continue
            v = self.staged[off:off + p.numel()]
            v.copy_(p.grad.reshape(-1))  # to float32 on the CPU
            views.append(v)
            bufs.append((v.data_ptr(), v.numel()))
            off += p.numel()
        h = param_hash(self.params) if b.check_hash else 0
        res = self.node.step(bufs, compute_s, loss_sum, correct, h)
        if res is None:
            return None
        for p, v in zip(self.params if views else (), views):
            p.grad.copy_(v.view_as(p.grad))  # the global mean, back in the parameter's kind
        self.optimizer.step()
        return res

    def close(self):
        self.node.close()
