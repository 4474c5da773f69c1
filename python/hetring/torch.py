"""hetring.torch: a PyTorch model and optimizer of your own on a hetring cluster.

    trainer = hetring.torch.Trainer("cluster.ini", model, optimizer, node_id=0,
                                    n_samples=len(train_set))
    for idx in trainer.batches():                   # this node's indices, iteration by iteration
        res = trainer.step(loss_fn, (X[idx], Y[idx]))
        if res is None:                              # the view changed: the iteration runs again
            continue
        print(res.iter, res.loss, res.next_batch)

or with a DataLoader: DataLoader(train_set, batch_sampler=trainer.sampler()), num_workers=0
(the sampler asks the cluster for each iteration's indices when the loop needs them), or, to
load each iteration's samples in parallel worker processes, trainer.loader(train_set,
num_workers=4), which yields collated batches.

An iteration's indices exist only once the step before it has run (the split follows every
node's last compute time, and a view change re-runs an iteration), so nothing can fetch a
batch ahead of step(): asking for the next one first raises RuntimeError. That is what a
DataLoader with num_workers > 0 over trainer.sampler() would do (its workers prefetch);
trainer.loader splits each iteration over its workers instead.

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

Leaving and resuming: trainer.leave() (or a signal named in leave_on, e.g. SIGTERM when the
machine is reclaimed) makes this node leave at the next iteration boundary the others agree
on: batches() then ends, trainer.left is True, and the others go on without it. Save with
trainer.save(path) (atomically: a temporary file, fsync, rename); Trainer(..., resume=path)
starts from such a file when it exists, and nodes that resume nothing receive the state of
the node furthest along.

Overlap (overlap=True, the default): a hook on every parameter hands its gradient to the
library as soon as backward has accumulated it (hetring_ready), so where the library uses
buckets ([train] bucket_bytes: auto where every node has a core to spare, or a size) the last
layers' gradients are all-reduced while backward computes the first ones, as DDP does.
"""
import multiprocessing
import os
import pickle
import signal
import stat
import time
import weakref

import torch

import hetring

_CKPT_FORMAT = "hetring.torch checkpoint 1"
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


_worker_dataset = None  # a loader worker's copy of the dataset


def _default_signals(ref):
    """In a forked child: the default handlers for the signals a Trainer turned into leave()."""
    t = ref()
    for sig in (t._signals if t is not None else ()):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except ValueError:  # forked from a thread other than the main one: none to reset
            pass


def _worker_init(dataset):
    global _worker_dataset
    _worker_dataset = dataset
    torch.set_num_threads(1)
    # a forked worker closes the sockets it inherited: the node's links and listening port stay
    # its own, and a link the node closes is closed (a worker ends with the node: its task
    # pipe reads end of file)
    try:
        fds = [int(f) for f in os.listdir("/proc/self/fd")]
    except OSError:
        fds = []
    for fd in fds:
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                os.close(fd)
        except OSError:
            pass


def _worker_load(indices):
    return [_worker_dataset[i] for i in indices]


class _Buffers:
    """One iteration's gradient memory as the library reads it."""

    __slots__ = ("targets", "bufs", "given")

    def __init__(self, targets):
        self.targets = targets
        self.bufs = [(t.data_ptr(), t.numel()) for t in targets]
        self.given = [False] * len(targets)


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

    node_id, n_samples, overrides, sync_first, start_iter: as hetring.Node (start_iter: the
    iteration of the checkpoint you loaded into model and optimizer, 0 for a new run). on_view(dict): called when a
    view is installed (nodes left or joined); every event is also kept in .views.
    clock: the seconds counter that times each node's compute for the controller (default
    time.perf_counter; time.thread_time counts only this thread's CPU, which keeps the speed
    signal steady on a machine whose cores are shared by more processes than it has).
    overlap: hand each gradient over from a backward hook as soon as it is computed (see the
    module's text); False hands them all over after backward.
    resume: a file that save() wrote: when it exists, the model and optimizer start from it
    (and start_iter is its iteration); when it does not, the run starts afresh.
    leave_on: signals (e.g. (signal.SIGTERM,)) whose arrival makes this node leave at the next
    boundary, as leave() does; the handlers are installed here (main thread only) and the
    previous ones put back by close(). A forked child (a loader worker) that receives one
    ends as it would have without them.
    """

    def __init__(self, conf, model, optimizer, node_id=None, n_samples=0, overrides=(),
                 on_view=None, sync_first=True, clock=time.perf_counter, overlap=True,
                 start_iter=0, resume=None, leave_on=()):
        self.model, self.optimizer = model, optimizer
        if resume is not None and os.path.exists(resume):
            start_iter = self._load(resume)
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
                                 start_iter=start_iter,
                                 get_state=lambda: state_bytes(self.model, self.optimizer),
                                 put_state=self._put, on_view=self._on_view)
        self._live = None  # this iteration's _Buffers while backward runs
        self._hooks = []
        self.done = start_iter  # iterations the model holds: what save() records
        self.left = False       # this node left the cluster (leave(), leave_on)
        self._signals = {}
        if overlap:
            self._install_hooks()
        me, owner = weakref.ref(self), os.getpid()

        def on_signal(sig, _frame):
            if os.getpid() != owner:  # a forked child (a loader worker) ends as it would have
                signal.signal(sig, signal.SIG_DFL)
                os.kill(os.getpid(), sig)
                return
            t = me()
            if t is not None:
                t.leave()

        for sig in leave_on:
            self._signals[sig] = signal.signal(sig, on_signal)
        if leave_on:
            # a forked child (a loader worker) gets the default handlers back at once: the
            # Python-level one would run only when its main thread runs Python again, which a
            # child blocked on a lock it inherited from the fork never does, and Pool.terminate
            # would then wait for it forever
            os.register_at_fork(after_in_child=lambda: _default_signals(me))

    def _load(self, path):
        """Adopt a file of save(); its iteration."""
        with open(path, "rb") as f:
            try:
                ck = pickle.load(f)  # a file of your own, as torch.load reads them
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
                raise ValueError(f"hetring.torch: {path} is not a checkpoint of Trainer.save "
                                 f"({e})") from None
        if not isinstance(ck, dict) or ck.get("format") != _CKPT_FORMAT:
            raise ValueError(f"hetring.torch: {path} is not a checkpoint of Trainer.save")
        with torch.no_grad():
            load_state_bytes(self.model, self.optimizer, ck["state"])
        return int(ck["iter"])

    def save(self, path):
        """The model, the optimizer and the iteration they are at, into path atomically (a
        temporary file in the same directory, fsync, rename): a crash leaves the old file."""
        data = pickle.dumps({"format": _CKPT_FORMAT, "iter": self.done,
                             "state": state_bytes(self.model, self.optimizer)}, protocol=4)
        tmp = f"{path}.tmp.{os.getpid()}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    def leave(self):
        """Leave the cluster at the next iteration boundary the members agree on: batches()
        then ends and .left is True. Safe from a signal handler."""
        self.node.leave()

    def _install_hooks(self):
        """A hook per parameter that runs once backward has accumulated its gradient:
        register_post_accumulate_grad_hook from PyTorch 2.1, before it a hook on the
        parameter's AccumulateGrad node (kept alive here, as DDP kept them)."""
        me = weakref.ref(self)  # the hooks must not keep the trainer alive

        def hook_for(k):
            def fire(*_):
                t = me()
                if t is not None:
                    t._grad_done(k)
            return fire

        for k, p in enumerate(self.params):
            if hasattr(p, "register_post_accumulate_grad_hook"):
                self._hooks.append((None, p.register_post_accumulate_grad_hook(hook_for(k))))
                continue
            with torch.enable_grad():
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
            self._hooks.append((acc, acc.register_hook(hook_for(k))))

    def _buffers(self):
        """This iteration's buffers, fixed before backward: every .grad exists and is
        contiguous; the library reads each .grad in place (float32 on the CPU) or its view of
        `staged`."""
        targets, off = [], 0
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            if self.staged is None:
                targets.append(p.grad)
            else:
                targets.append(self.staged[off:off + p.numel()])
                off += p.numel()
        return _Buffers(targets)

    def _collect(self, k):
        """Parameter k's gradient into the memory the library reads."""
        p, t = self.params[k], self._live.targets[k]
        if self.staged is not None:
            t.copy_(p.grad.reshape(-1))  # to float32 on the CPU
        elif p.grad.data_ptr() != t.data_ptr():  # autograd gave .grad new memory
            t.copy_(p.grad)
            p.grad = t
        self._live.given[k] = True

    def _grad_done(self, k):
        """The hook: hand parameter k's gradient over while backward goes on."""
        live = self._live
        if live is None or live.given[k]:  # a backward outside step(), or a second call
            return
        self._collect(k)
        self.node.ready(live.bufs, k)

    def _put(self, data):
        with torch.no_grad():
            load_state_bytes(self.model, self.optimizer, data)

    def _on_view(self, v):
        self.done = v["iter"]  # the state a view change moved is at that iteration
        self.views.append(v)
        if self._user_view:
            self._user_view(v)

    def batches(self):
        """This node's indices (a LongTensor) for each iteration until the run is done.

        Each is asked of the cluster once step() has run on the one before (RuntimeError if
        it has not: indices cannot be fetched ahead). Ends early, with .left set, once this
        node left the cluster (leave())."""
        while True:
            try:
                b = self.node.next()
            except hetring.Left:
                self.left = True
                return
            if b is None:
                return
            self.batch = b
            yield torch.tensor(b.indices, dtype=torch.long)
            if self.batch is b:
                raise RuntimeError(
                    f"hetring.torch: the indices after iteration {b.iter} were asked for "
                    f"before step() ran on it; each iteration's split follows the step before "
                    f"it, so batches cannot be fetched ahead (a DataLoader over sampler() "
                    f"needs num_workers=0; trainer.loader(dataset, num_workers=N) loads each "
                    f"iteration in parallel instead)")

    def sampler(self):
        """A batch_sampler for DataLoader(dataset, batch_sampler=..., num_workers=0)."""
        return Sampler(self)

    def loader(self, dataset, num_workers=0, collate_fn=None, mp_context="fork"):
        """Collated batches of dataset[i] over this node's indices, iteration by iteration.

        num_workers > 0 loads each iteration's samples in that many worker processes (each
        a contiguous part of the indices, in order), started once with the multiprocessing
        start method `mp_context`. The default, "fork", shares the dataset without pickling
        it; each worker closes the sockets it inherits, and ends with the node. "spawn"
        and "forkserver" need a picklable dataset and a script whose top level is guarded by
        `if __name__ == "__main__":` (the workers import it). collate_fn: default
        torch.utils.data.default_collate. An empty share (batch 0) yields None, which step()
        accepts."""
        collate = collate_fn or torch.utils.data.default_collate
        if num_workers < 0:
            raise ValueError(f"hetring.torch: num_workers must be >= 0, not {num_workers}")
        if num_workers == 0:
            for idx in self.batches():
                yield collate([dataset[i] for i in idx.tolist()]) if len(idx) else None
            return
        ctx = multiprocessing.get_context(mp_context)
        with ctx.Pool(num_workers, initializer=_worker_init,
                      initargs=(dataset,)) as pool:
            for idx in self.batches():
                ids = idx.tolist()
                per = -(-len(ids) // num_workers) if ids else 1
                parts = pool.map(_worker_load, [ids[k:k + per] for k in range(0, len(ids), per)])
                yield collate([s for part in parts for s in part]) if ids else None

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
        self.optimizer.zero_grad(set_to_none=False)
        t0 = self.clock()
        live = self._live = self._buffers()
        loss_sum, correct = 0.0, 0
        try:
            if b.batch > 0:
                x, y = batch
                out = self.model(x)
                loss = loss_fn(out, y)
                (loss * b.batch).backward()  # the mean over b samples, as their sum
                loss_sum = float(loss.detach()) * b.batch
                if y.dtype in _INT_TYPES and out.dim() == 2:
                    correct = int((out.detach().argmax(1) == y).sum())
        finally:
            self._live = None
        if self._cuda:
            torch.cuda.synchronize()  # the compute time includes the kernels still queued
        compute_s = self.clock() - t0
        self._live = live
        for k in range(len(self.params)):
            if not live.given[k]:
                self._collect(k)  # no hook ran for it (overlap off, or unused in this graph)
        self._live = None
        h = param_hash(self.params) if b.check_hash else 0
        res = self.node.step(live.bufs, compute_s, loss_sum, correct, h)
        if res is None:
            return None
        if self.staged is not None:
            for p, v in zip(self.params, live.targets):
                p.grad.copy_(v.view_as(p.grad))  # the global mean, back in the parameter's kind
        self.optimizer.step()
        self.done = res.iter + 1
        return res

    def close(self):
        for sig, old in self._signals.items():
            signal.signal(sig, old)
        self._signals = {}
        for _, handle in self._hooks:
            handle.remove()
        self._hooks = []
        self.node.close()
