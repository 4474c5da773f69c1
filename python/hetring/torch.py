"""hetring.torch: a PyTorch model and optimizer of your own on a hetring cluster.

    with hetring.torch.Trainer("cluster.ini", model, optimizer, node_id=0,
                               n_samples=len(train_set)) as trainer:
        for idx in trainer.batches():               # this node's indices, iteration by iteration
            res = trainer.step(loss_fn, (X[idx], Y[idx]), batch_size=len(idx))
            if res is None:                          # the view changed: the iteration runs again
                continue
            print(res.iter, res.loss, res.next_batch)

The with block closes the Trainer however it ends (an exception, a KeyboardInterrupt): this
node leaves the ring at once and the others go on without it. The batch must hold exactly the
samples of the indices, the node's share, by which the all-reduce weights its gradient;
batch_size= (the samples in the batch along your batch dimension) has step() refuse one of
another size (see step()).

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
A model converted or moved after the Trainer was made (model.double(), model.to(device)) is
staged anew at the next step. What the all-reduce carries is otherwise fixed when the Trainer
is made: a parameter made to require grad later, a tensor assigned in a parameter's place,
and a buffer dropped or resized later are refused by name at the next step (make them before
the Trainer; a buffer registered later is not carried, only hashed).

Leaving and resuming: trainer.leave() (or a signal named in leave_on, e.g. SIGTERM when the
machine is reclaimed) makes this node leave at the next iteration boundary the others agree
on: batches() then ends, trainer.left is True, and the others go on without it. Save with
trainer.save(path) (atomically, as the C library writes its checkpoints: a temporary file
PATH.tmp.PID.TAG, fsync, rename, the directory fsynced; what killed saves left is removed; a
symbolic link is kept and the file it leads to replaced);
Trainer(..., resume=path) starts from such a file when it exists, and nodes that resume
nothing receive the state of the node furthest along.

Buffers (buffers="average", the default): every registered buffer (BatchNorm's running
statistics, num_batches_tracked, any buffer of your own) is made the same on every node at
every iteration. What forward changed in a floating buffer goes into the all-reduce with the
gradients as b_k x (new - old), so each node gets old + sum_k (b_k/B)(new_k - old): the
batch-size-weighted average of the members' buffers, the running statistics one node would
have had over the whole batch (the mean exactly, the variance to first order); a node with an
empty share weighs 0 and the divisor is B = sum_k b_k. Integer and bool buffers go the same way
and are rounded (old + the change every node made); a fractional result, nodes that changed
them differently, is an error. An element forward left alone keeps its bits (a causal mask of
-inf, a NaN). A change the all-reduce cannot carry as a number (inf or NaN in the old or the
new value, beyond float32's range, an integer step over 4096) is taken, bit for bit, only where
every node made the same one (a hash of it goes in the same all-reduce); otherwise every node
stops with an error naming the buffer. Tensors on the meta device, sparse ones, and buffers of
kinds other than floating, complex, integer and bool are refused when the Trainer is made.
buffers="lowest" takes the lowest member's change instead (DDP's
broadcast_buffers), buffers="off" leaves each node its own (logged once as a warning; the
replica hash then leaves the buffers out). Otherwise the hash on hash iterations covers every
parameter (frozen ones too) and every buffer, so a replica that differs anywhere stops the
cluster.

Synchronised BatchNorm (sync_bn=True, or convert_sync_batchnorm(model) before the Trainer):
in training, each BatchNorm layer takes its statistics over the whole global batch: every
node's per-channel sum, sum of squares and count go through the ring in forward
(Node.allreduce), and the matching two sums in backward, so an N-node run follows the 1-node
run of the same global batch (I3). It costs two small all-reduces per layer and iteration, and
the gradients are all handed over after backward (overlap must be off). A node with an empty
share still runs forward and backward on its empty batch and takes part.

Gradient clipping and the learning rate: before_step(trainer) runs after the all-reduce, when
every .grad holds the global mean, and before optimizer.step(): clip there
(torch.nn.utils.clip_grad_norm_ clips the global gradient, the same on every node). A
scheduler given as scheduler= is stepped after every applied optimizer step and every step
skipped as not finite (never for an iteration that runs again) and its state moves with the
model's to a node that joins and into save().

Steps that are not finite: a NaN or an inf in any node's loss or gradient, or a global sum that
overflows, stops every node with hetring.NonFinite naming the iteration and the nodes ([train]
nonfinite = error, the default), or with nonfinite = skip skips the optimizer step on every
node, as AMP's GradScaler does (trainer.skipped counts them; the iteration's samples count as
used).

Overlap (overlap=True, the default without sync_bn): a hook on every parameter hands its
gradient to the library as soon as backward has accumulated it (hetring_ready), so where the
library uses buckets ([train] bucket_bytes: auto where every node has a core to spare, or a
size) the last layers' gradients are all-reduced while backward computes the first ones, as
DDP does.
"""
import ctypes
import errno
import hashlib
import io
import logging
import multiprocessing
import operator
import os
import pickle
import signal
import socket
import stat
import threading
import time
import types
import weakref
import zlib

import torch

import hetring

_CKPT_FORMAT = "hetring.torch checkpoint 1"
_INT_TYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
_BUFFER_MODES = ("average", "lowest", "off")


# kinds numpy lacks, packed as the bytes of an integer kind of their size
_AS_INT = {torch.bfloat16: torch.int16}

# The buffers' changes in the all-reduce (see _carry): a change goes as a number where float32
# carries it exactly enough, the rest (inf, NaN, beyond float32's range, large integer steps)
# only where every member made it alike, which a hash of it in pieces checks.
_FLT_MAX = float(torch.finfo(torch.float32).max)
_INT_SUM = 2 ** 24   # integers float32 holds exactly: B x an integer change stays within it
_INT_STEP = 4096     # the largest integer change carried as a number: its mean, times 1/B in
#                      float32, stays within 1e-3 of an integer and rounds back exactly
_PIECES, _PIECE_BITS = 6, 6  # the agreement hash, 36 bits in pieces of 6, each sent as x and
#                              x^2: for up to 256 members every sum stays below 2^20, exact
#                              through the library's 1/B, and M sum(x^2) = (sum x)^2 only where
#                              every member's x is the same
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _real(t):
    """t's memory as a tensor of a real kind: complex as (re, im) pairs, bool as uint8."""
    if t.dtype.is_complex:
        return torch.view_as_real(t)
    return t.view(torch.uint8) if t.dtype == torch.bool else t


def _bits(t):
    """t's elements as integers of their size: equal bit for bit (NaN payloads, -0.0)."""
    return t.view(_BITS[t.element_size()])


def _check_state(model):
    """Refuse at construction what a Trainer could not train, hash, carry or move: tensors
    without data (the meta device), sparse ones, buffers of kinds other than floating,
    complex, integer and bool."""
    for kind, named in (("parameter", model.named_parameters()),
                        ("buffer", model.named_buffers())):
        for n, t in named:
            if t.device.type == "meta":
                raise ValueError(f"hetring.torch: the {kind} {n!r} is on the meta device, "
                                 f"which holds no data to train, hash or send to a joining "
                                 f"node; materialise the model first (model.to_empty(device="
                                 f"...), then initialise or load it)")
            if t.layout != torch.strided:
                raise ValueError(f"hetring.torch: the {kind} {n!r} is {t.layout}; hetring.torch "
                                 f"hashes, carries and sends dense tensors only (.to_dense())")
            if kind == "buffer" and not (t.dtype.is_floating_point or t.dtype.is_complex or
                                         t.dtype in _INT_TYPES or t.dtype == torch.bool):
                raise ValueError(f"hetring.torch: the buffer {n!r} is of dtype {t.dtype}, which "
                                 f"hetring.torch can neither carry in the all-reduce nor send "
                                 f"to a joining node (floating, complex, integer and bool "
                                 f"buffers it can)")


_METHOD, _WEAKMETHOD = "hetring.torch method", "hetring.torch weakmethod"


def _pack(v, owner=None):
    """v with every tensor in it, also inside lists, tuples and dicts, as its bytes: pickle
    would write a tensor's storage by its address, different on every node. With owner (a
    scheduler), its own methods (OneCycleLR's anneal_func, CyclicLR's WeakMethod) by name: they
    would pickle the scheduler itself, optimizer and parameters with it, or not at all."""
    if torch.is_tensor(v):
        t = v.detach().cpu().contiguous()
        raw = t.view(_AS_INT[t.dtype]) if t.dtype in _AS_INT else t
        return ("tensor", str(t.dtype).split(".")[-1], tuple(t.shape), raw.numpy().tobytes())
    if type(v) is list:
        return [_pack(x, owner) for x in v]
    if type(v) is tuple:
        return tuple(_pack(x, owner) for x in v)
    if type(v) is dict:
        return {k: _pack(x, owner) for k, x in v.items()}
    if owner is not None:
        if isinstance(v, weakref.WeakMethod):
            m = v()
            if m is not None and m.__self__ is owner:
                return (_WEAKMETHOD, m.__func__.__name__)
        elif isinstance(v, types.MethodType) and v.__self__ is owner:
            return (_METHOD, v.__func__.__name__)
    return v


def _unpack(v, owner=None):
    if type(v) is tuple:
        if len(v) == 4 and v[0] == "tensor":
            _, dtype, shape, data = v
            dt = getattr(torch, dtype)
            if not data:
                return torch.zeros(shape, dtype=dt)
            raw = torch.frombuffer(bytearray(data), dtype=_AS_INT.get(dt, dt))
            return raw.view(dt).reshape(shape).clone()
        if len(v) == 2 and v[0] in (_METHOD, _WEAKMETHOD) and owner is not None:
            m = getattr(owner, v[1])
            return m if v[0] == _METHOD else weakref.WeakMethod(m)
        return tuple(_unpack(x, owner) for x in v)
    if type(v) is list:
        return [_unpack(x, owner) for x in v]
    if type(v) is dict:
        return {k: _unpack(x, owner) for k, x in v.items()}
    return v


def _dumps(obj):
    """pickle's bytes of obj without its memo: the same bytes for equal values however the
    objects in it are shared (one string twice, or two equal strings), which differs between
    a node that built its state and one that received it."""
    f = io.BytesIO()
    p = pickle.Pickler(f, protocol=4)
    p.fast = True
    p.dump(obj)
    return f.getvalue()


def _extra_buffers(model):
    """The buffers state_dict leaves out (registered with persistent=False), by name."""
    kept = model.state_dict().keys()
    return [(n, t) for n, t in model.named_buffers() if n not in kept]


def state_bytes(model, optimizer=None, scheduler=None):
    """The model's (with its non-persistent buffers), the optimizer's and the scheduler's
    state as bytes, the same bytes for the same state."""
    m = [(k, _pack(v)) for k, v in model.state_dict().items()]
    o = None
    if optimizer is not None:
        sd = optimizer.state_dict()
        o = ([(k, [(n, _pack(v)) for n, v in s.items()]) for k, s in sd["state"].items()],
             _pack(sd["param_groups"]))
    extra = [(n, _pack(t)) for n, t in _extra_buffers(model)]
    if scheduler is None and not extra:
        return _dumps((m, o))
    sc = (sorted((k, _pack(v, scheduler)) for k, v in scheduler.state_dict().items())
          if scheduler is not None else None)
    return _dumps((m, o, sc, extra))


def _ns_tag():
    """This process namespace as 8 hex digits, as base/hr_file.c's ns_tag computes it (the CRC-32
    of the boot id's first 64 bytes, the /proc/self/ns/pid link's first 128 and the host name),
    so a checkpoint's temporary file is named as the C library names it and either side knows
    the other's leftovers as this namespace's (test_save.py ctag compares the two)."""
    b = b""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            b = f.read(64)
    except OSError:
        pass
    try:
        b += os.fsencode(os.readlink("/proc/self/ns/pid"))[:128]
    except OSError:
        pass
    return f"{zlib.crc32(b + os.fsencode(socket.gethostname())) & 0xffffffff:08x}"


def _tmp_name(path):
    """PATH.tmp.PID.TAG, hr_file_tmp_name's name: this process's alone also where processes of
    two containers or machines, each with its own process ids, write one file in a shared
    directory."""
    return f"{path}.tmp.{os.getpid()}.{_ns_tag()}"


def _remove_stale(path, what):
    """Remove what writes of path left when their process was killed, as hr_file_remove_stale
    does: PATH.tmp.PID.TAG of this namespace (and PATH.tmp.PID of versions before the tag) whose
    process no longer runs. Those of another namespace are kept (a process id means nothing
    here: a write there may be running) and named in an INFO line, as are those removed."""
    log = logging.getLogger("hetring.torch")
    d, base = os.path.split(path)
    d = d or "."
    try:
        names = os.listdir(d)
    except OSError:
        return
    tag, prefix = _ns_tag(), base + ".tmp."
    for name in names:
        if not name.startswith(prefix):
            continue
        pid, dot, rest = name[len(prefix):].partition(".")  # PID, or PID.TAG
        if not pid.isascii() or not pid.isdigit() or not 0 < int(pid) < 2**31:
            continue
        if dot and (len(rest) != 8 or rest.strip("0123456789abcdef")):
            continue
        full = os.path.join(d, name)
        if dot and rest != tag:
            log.info("hetring.torch: kept %s: the temporary file of a %s from another container "
                     "or machine, which may still be writing it (remove it once nothing writes "
                     "%s there)", full, what, base)
            continue
        try:
            if int(pid) == os.getpid():
                continue
            os.kill(int(pid), 0)
            continue  # it runs: its write may be going on
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(full)
            log.info("hetring.torch: removed %s, left by an interrupted %s of process %s", full,
                     what, pid)
        except OSError:
            pass


def _target(path):
    """The file writing path reaches, as hr_file_target finds it: path, or where its chain of
    symbolic links ends (a relative link read from the link's own directory), also when that
    file does not exist yet. OSError ELOOP after 40 links."""
    out = path
    for hops in range(41):
        try:
            if not stat.S_ISLNK(os.lstat(out).st_mode):
                return out
        except OSError:  # a new file (what stops that, open says)
            return out
        if hops == 40:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)
        link, slash = os.readlink(out), out.rfind("/")
        out = link if link.startswith("/") or slash < 0 else out[:slash + 1] + link
    return out


def _write_replace(path, data):
    """data into path whole or not at all, as hr_file.c writes a file that replaces another:
    where path is a symbolic link, into the file it leads to (_target), and the link stays;
    leftovers of killed writes removed, written to _tmp_name, fsynced, renamed over the file,
    and the directory fsynced, so that a crash keeps the new file or the old one."""
    path = _target(path)
    _remove_stale(path, "checkpoint save")
    tmp = _tmp_name(path)
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
    try:  # the directory holds the rename: synced, or a crash may lose it
        fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_state_bytes(model, optimizer, data, scheduler=None):
    """Adopt a state that state_bytes made (on a model and optimizer of the same shape)."""
    m, o, *rest = pickle.loads(data)
    model.load_state_dict({k: _unpack(v) for k, v in m})
    if optimizer is not None and o is not None:
        st, groups = o
        optimizer.load_state_dict({"state": {k: {n: _unpack(v) for n, v in s} for k, s in st},
                                   "param_groups": _unpack(groups)})
    if scheduler is not None and rest and rest[0] is not None:
        scheduler.load_state_dict({k: _unpack(v, scheduler) for k, v in rest[0]})
    named = dict(model.named_buffers())
    for n, v in rest[1] if len(rest) > 1 else ():
        with torch.no_grad():
            named[n].copy_(_unpack(v))


def param_hash(params, h=0):
    """hetring_hash over the bytes of every tensor, in order (copied to the CPU first)."""
    for p in params:
        t = p.detach()
        if t.device.type != "cpu" or not t.is_contiguous():
            t = t.to("cpu").contiguous()
        h = hetring.hash_bytes(t.data_ptr(), t.numel() * t.element_size(), h)
    return h


def state_tensors(model, buffers=True):
    """Every parameter of model once (shared ones once, frozen ones too), then, with buffers,
    every buffer once: what the replica hash covers."""
    seen, out = set(), []
    for t in list(model.parameters()) + (list(model.buffers()) if buffers else []):
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def state_hash(model, buffers=True):
    """The replica hash of hetring.torch: param_hash over state_tensors(model, buffers)."""
    return param_hash(state_tensors(model, buffers))


_worker_dataset = None  # a loader worker's copy of the dataset


class _SignalWatcher:
    """Sets the leave flag (hetring.h, leave_flag) of every Trainer that named a signal the
    moment it arrives, also while the main thread is blocked in the library (open waiting for
    its peers, an election waiting for a quorum), where Python runs a signal's handler only
    once the call returns. Python's own C-level handler writes each signal's number to the
    wakeup fd at once; this thread reads them and passes them on to the wakeup fd there was
    before (asyncio's). One for the process, however many Trainers name signals."""

    def __init__(self):
        self.r, self.w = os.pipe()
        os.set_blocking(self.w, False)  # as set_wakeup_fd requires
        try:
            self.old = signal.set_wakeup_fd(self.w)
        except BaseException:
            os.close(self.r)
            os.close(self.w)
            raise
        self.thread = threading.Thread(target=self._run, name="hetring.torch leave_on",
                                       daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                got = os.read(self.r, 64)
            except OSError:
                return
            if not got or 0 in got:  # close()'s stop byte (no signal is 0)
                return
            for _, sigs, flag in _leave_on.trainers:
                if any(n in sigs for n in got):
                    flag.value = 1
            if self.old >= 0:
                try:
                    os.write(self.old, got)
                except OSError:
                    pass

    def close(self):
        """The wakeup fd there was before back (main thread), the thread ended."""
        now = signal.set_wakeup_fd(self.old)
        if now != self.w:  # another took it since: theirs stays
            signal.set_wakeup_fd(now)
        os.write(self.w, b"\0")
        self.thread.join(5)
        os.close(self.r)
        os.close(self.w)


class _LeaveOn:
    """The process's leave_on signals, shared by every open Trainer that names one: one
    handler per signal, which makes each Trainer that named it leave; one watcher; one fork
    hook. A signal's handler from before comes back when the last Trainer that named it
    closes (unless another was installed since). trainers is replaced, never changed in
    place: the handler and the watcher read it without the lock, which the main thread may
    hold when a signal's handler runs."""
    lock = threading.Lock()
    trainers = ()  # (weakref to the Trainer, its signal numbers, its leave flag)
    saved = {}     # signal number -> its handler before hetring.torch's
    watcher = None
    pid = None     # the process that installed them
    hooked = False

    @staticmethod
    def handler(sig, _frame):
        if os.getpid() != _leave_on.pid:  # a forked child (a loader worker) ends as it would
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            return
        for ref, sigs, _ in _leave_on.trainers:
            t = ref()
            if t is not None and sig in sigs:
                t.leave()

    @classmethod
    def add(cls, t, leave_on):
        """t's signals: handlers for those no Trainer named yet (refused, with nothing
        changed, for one that cannot be caught), then the watcher and the fork hook."""
        with cls.lock:
            new = []

            def undo():
                for n in new:
                    signal.signal(n, cls.saved.pop(n))
            try:
                for sig in leave_on:
                    if int(sig) not in cls.saved and int(sig) not in new:
                        cls.saved[int(sig)] = signal.signal(sig, cls.handler)
                        new.append(int(sig))
            except (OSError, ValueError, TypeError) as e:  # SIGKILL, not a signal, a thread
                undo()
                raise ValueError(f"hetring.torch: leave_on: no handler can be installed for "
                                 f"{sig!r} ({e}); leave_on takes signals that can be caught "
                                 f"(signal.SIGTERM, SIGINT, SIGUSR1, ...), and only in the "
                                 f"main thread") from None
            try:
                if cls.watcher is None:
                    cls.watcher = _SignalWatcher()
            except BaseException:
                undo()
                raise
            cls.pid = os.getpid()
            cls.trainers = tuple(e for e in cls.trainers if e[0]() is not None) + (
                (weakref.ref(t), frozenset(int(s) for s in leave_on), t._leave_flag),)
            if not cls.hooked:
                # a forked child (a loader worker) gets the default handlers back at once: the
                # Python-level one would run only when its main thread runs Python again,
                # which a child blocked on a lock it inherited from the fork never does, and
                # Pool.terminate would then wait for it forever
                os.register_at_fork(after_in_child=cls.after_fork)
                cls.hooked = True

    @classmethod
    def remove(cls, t):
        """t's signals given up: the handlers from before back for those no other open
        Trainer names, the watcher ended with the last Trainer."""
        with cls.lock:
            if not any(e[0]() is t for e in cls.trainers):
                return
            cls.trainers = tuple(e for e in cls.trainers if e[0]() not in (t, None))
            named = set().union(*(sigs for _, sigs, _ in cls.trainers))
            for sig in [s for s in cls.saved if s not in named]:
                old = cls.saved.pop(sig)
                if signal.getsignal(sig) is cls.handler:  # another's since: theirs stays
                    signal.signal(sig, old)
            if not cls.trainers and cls.watcher is not None:
                cls.watcher.close()
                cls.watcher = None

    @classmethod
    def after_fork(cls):
        """In a forked child: the default handlers for the signals Trainers named, no wakeup
        fd (the parent's watcher reads its pipe), and none of the parent's Trainers."""
        for sig in cls.saved:
            try:
                signal.signal(sig, signal.SIG_DFL)
            except ValueError:  # forked from a thread other than the main one: none to reset
                pass
        if cls.watcher is not None:
            try:
                signal.set_wakeup_fd(-1)
            except ValueError:
                pass
        cls.lock = threading.Lock()  # another thread of the parent may have held it
        cls.trainers, cls.saved, cls.watcher = (), {}, None


_leave_on = _LeaveOn


class _HoldInterrupt:
    """SIGINT held back while it lasts, then its handler run (KeyboardInterrupt with Python's
    own): around the library's step and the update, so that a Ctrl-C landing as the step
    returns, a few bytecodes before the update is applied, cannot leave this node's model
    without the iteration every other node applied (the replicas would differ). The library
    retries its calls that a signal interrupts, and Python runs a handler only once the call
    returns in any case, so the interrupt waits only for the update itself. Only in the main
    thread (where Python runs handlers) and only for a handler of Python's (not SIG_IGN or
    SIG_DFL, or one installed from C)."""

    def __enter__(self):
        self.got, self.old = None, None
        if threading.current_thread() is threading.main_thread():
            old = signal.getsignal(signal.SIGINT)
            if callable(old):
                signal.signal(signal.SIGINT, self._hold)
                self.old = old
        return self

    def _hold(self, sig, frame):
        if self.got is None:
            self.got = (sig, frame)

    def __exit__(self, *exc):
        if self.old is None:
            return
        signal.signal(signal.SIGINT, self.old)
        if self.got is not None:
            self.old(*self.got)  # the update is whole: the interrupt may go on up now


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


# ------------------------------------------------------------------ synchronised BatchNorm


class _ViewChanged(Exception):
    """A collective inside forward or backward saw the view change: the iteration runs again."""


def _sum_dims(x):
    return [0] + list(range(2, x.dim()))


class _SyncBNFn(torch.autograd.Function):
    """BatchNorm over the whole global batch. Forward: this node's per-channel sum and sum of
    squares of x - K (K: the running mean, the same on every node, which keeps the sums small)
    and its count, summed over the ring; backward: the per-channel sums of dy and dy * x_hat,
    summed over the ring. The weight's and the bias's gradients are this node's own parts
    (the gradient all-reduce adds them up, as for every other parameter)."""

    @staticmethod
    def forward(ctx, x, weight, bias, shift, comm, eps, info):
        C = x.shape[1]
        xf = x.float()
        d = xf - shift.view(1, C, *([1] * (x.dim() - 2)))
        dims = _sum_dims(x)
        n = x.numel() // C if x.numel() else 0
        v = torch.cat([d.double().sum(dims), (d.double() * d.double()).sum(dims),
                       torch.tensor([float(n)], dtype=torch.float64, device=x.device)]).float()
        comm(v)  # the sums over every node's share
        N = float(v[2 * C])
        if N < 2:
            raise ValueError(f"hetring.torch: SyncBatchNorm needs more than 1 value per channel "
                             f"over the global batch in training, got {N:.0f}")
        m = v[:C].double() / N
        var = (v[C:2 * C].double() / N - m * m).clamp_(min=0)
        mean = (shift.double() + m).float()
        var = var.float()
        invstd = torch.rsqrt(var + eps)
        shape = (1, C) + (1,) * (x.dim() - 2)
        xhat = (xf - mean.view(shape)) * invstd.view(shape)
        y = xhat
        if weight is not None:
            y = y * weight.float().view(shape) + bias.float().view(shape)
        ctx.save_for_backward(xhat, invstd, weight)
        ctx.comm, ctx.N, ctx.dtype = comm, N, x.dtype
        info["mean"], info["var"], info["N"] = mean, var, N  # for the running statistics
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, gy):
        xhat, invstd, weight = ctx.saved_tensors
        C = xhat.shape[1]
        shape = (1, C) + (1,) * (xhat.dim() - 2)
        g = gy.float()
        dims = _sum_dims(xhat)
        local = torch.cat([g.sum(dims), (g * xhat).sum(dims)])
        tot = local.clone()
        ctx.comm(tot)
        N = ctx.N
        w = weight.float() if weight is not None else torch.ones(C, device=g.device)
        gx = (g - (tot[:C] / N).view(shape) - xhat * (tot[C:] / N).view(shape)) * \
            (w * invstd).view(shape)
        gw = local[C:].to(weight.dtype) if weight is not None and ctx.needs_input_grad[1] else None
        gb = local[:C].to(weight.dtype) if weight is not None and ctx.needs_input_grad[2] else None
        return gx.to(ctx.dtype), gw, gb, None, None, None, None


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """BatchNorm of any dimension whose training statistics are those of the whole global
    batch of a hetring cluster (the Trainer connects it); without a Trainer, and in eval mode,
    the plain BatchNorm. Made by convert_sync_batchnorm(model) or Trainer(sync_bn=True)."""

    _comm = None  # the Trainer's all-reduce (in place, float32 on the CPU), or None

    def _check_input_dim(self, x):
        if x.dim() < 2:
            raise ValueError(f"hetring.torch: SyncBatchNorm expects at least 2D input, got "
                             f"{x.dim()}D")

    def forward(self, x):
        self._check_input_dim(x)
        if not self.training or self._comm is None:
            return super().forward(x)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            factor = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                      else self.momentum)
        shift = (self.running_mean.detach().float() if self.track_running_stats
                 else torch.zeros(x.shape[1], device=x.device))
        info = {}
        out = _SyncBNFn.apply(x, self.weight, self.bias, shift, self._comm, self.eps, info)
        if self.track_running_stats:
            mean, var, N = info["mean"], info["var"], info["N"]
            with torch.no_grad():
                self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype),
                                                        alpha=factor)
                unbiased = var * (N / (N - 1))
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype),
                                                       alpha=factor)
        return out


def convert_sync_batchnorm(model):
    """model with every BatchNorm1d/2d/3d (and torch.nn.SyncBatchNorm) replaced by a hetring
    SyncBatchNorm that holds the same parameter and buffer tensors (an optimizer made before
    keeps working). Returns the model (a new module only when model itself is a BatchNorm)."""
    if isinstance(model, torch.nn.modules.batchnorm._BatchNorm) and \
            not isinstance(model, SyncBatchNorm):
        new = SyncBatchNorm(model.num_features, model.eps, model.momentum, model.affine,
                            model.track_running_stats)
        if model.affine:
            new.weight, new.bias = model.weight, model.bias
        if model.track_running_stats:
            new.running_mean, new.running_var = model.running_mean, model.running_var
            new.num_batches_tracked = model.num_batches_tracked
        new.training = model.training
        return new
    for name, child in model.named_children():
        new = convert_sync_batchnorm(child)
        if new is not child:
            setattr(model, name, new)
    return model


class _Buffers:
    """One iteration's gradient memory as the library reads it."""

    __slots__ = ("targets", "bufs", "given", "carry_due", "handed")

    def __init__(self, targets):
        self.targets = targets
        self.bufs = [(t.data_ptr(), t.numel()) for t in targets]
        self.given = [False] * len(targets)  # collected (the buffers' changes: computed)
        self.carry_due = False  # the buffers' changes wait for the first hook to hand them over
        self.handed = False     # something went to the library (ready): no taking it back


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
    module's text); False hands them all over after backward. None (the default): True,
    but False with synchronised BatchNorm, which overlap=True cannot go with.
    buffers: "average" (the default), "lowest" or "off": how the model's buffers are kept
    the same on every node (see the module's text).
    sync_bn: replace every BatchNorm layer of model by a SyncBatchNorm (convert_sync_batchnorm,
    in place; the parameters and buffers stay the same tensors); a model that holds
    SyncBatchNorm layers already is synchronised without it.
    before_step(trainer): called after the all-reduce (every .grad the global mean) and
    before optimizer.step(): the place to clip gradients.
    scheduler: a learning-rate scheduler stepped after every applied (or skipped) step, whose
    state moves and is saved with the model's and the optimizer's.
    resume: a file that save() wrote: when it exists, the model and optimizer start from it
    (and start_iter is its iteration); when it does not, the run starts afresh.
    leave_on: signals (e.g. (signal.SIGTERM,)) whose arrival makes this node leave at the next
    boundary, as leave() does; the handlers are installed here (main thread only), before the
    node opens (a signal that cannot be caught raises ValueError with no node open), and the
    previous ones put back when the last open Trainer that names the signal closes (Trainers
    in one process share the signals: one makes every Trainer that names it leave). One
    takes effect at once, also while the main thread is
    blocked in the library, where Python's handlers wait for the call to return: a thread woken
    through signal.set_wakeup_fd sets the node's leave flag (the wakeup fd there was before
    gets every signal passed on), so an election waiting for a quorum ends (step() returns
    None, .left is True), and so does the node's open waiting for its peers (Trainer() raises
    hetring.Left). A forked child (a loader worker) that receives one ends as it would have
    without them. A Trainer that fails to be made closes what it opened.

    `with Trainer(...) as t:` closes it at the block's end, also on an exception or a
    KeyboardInterrupt: this node leaves the ring at once and the others go on without it.
    """

    def __init__(self, conf, model, optimizer, node_id=None, n_samples=0, overrides=(),
                 on_view=None, sync_first=True, clock=time.perf_counter, overlap=None,
                 start_iter=0, resume=None, leave_on=(), buffers="average", sync_bn=False,
                 before_step=None, scheduler=None):
        overlap = self._prepare_model(model, buffers, sync_bn, overlap)
        self.optimizer, self.scheduler = optimizer, scheduler
        self.before_step = before_step
        self.buffer_mode = buffers
        if resume is not None and os.path.exists(resume):
            start_iter = self._load(resume)
        self.clock = clock
        self._setup_params()
        _check_state(self.model)
        self._setup_buffers(buffers)
        try:  # what a joining node, the replica check and save() need: refused before it opens
            packed = state_bytes(self.model, self.optimizer, self.scheduler)
        except Exception as e:  # noqa: BLE001  (pickle raises several kinds)
            raise ValueError(f"hetring.torch: the training state cannot be pickled, which a "
                             f"joining node, the state check and save() need: "
                             f"{type(e).__name__}: {e} (the model's, optimizer's and "
                             f"scheduler's state_dict() may hold tensors, numbers, strings, "
                             f"module-level functions and containers of them)") from e
        self._comm_s = 0.0  # seconds this iteration spent in collectives of its own (sync BN)
        self._collectives = 0  # the collectives of its own this iteration took part in
        self._empty = None  # an empty batch of the input's shape, for an empty share (sync BN)
        self._snap = None   # the buffers as the iteration found them, while it runs
        self.views = []
        self._user_view = on_view
        self.batch = None  # the hetring.Batch being computed
        self._live = None  # this iteration's _Buffers while backward runs
        self._hooks = []
        self.node = None
        self._pid = os.getpid()  # the process whose node this is (a forked child's is not)
        # hetring.h leave_flag: leave() and the leave_on watcher set it, also before the node
        # opens and while a call of it blocks
        self._leave_flag = ctypes.c_int(0)
        # the state as packed above, which nothing changes until the first view: that view's
        # get_state calls (the donor's transfer, the state check) take it instead of packing
        # it again; a state received (_put) or a view reported (_on_view) drops it
        self._packed = packed
        try:
            # the signals first: one that cannot be caught is refused before a node opens
            self._install_signals(leave_on)
            self._open(conf, node_id, n_samples, overrides, sync_first, start_iter, overlap)
        except BaseException:
            self.close()  # no node, port or handler outlives a Trainer that failed
            raise
        finally:
            self._packed = None

    def _open(self, conf, node_id, n_samples, overrides, sync_first, start_iter, overlap):
        """The node, then what needs it."""
        # iterations the model holds, what save() records: the first view (_on_view, while the
        # node opens) moves it on to the state it starts from
        self.done = start_iter
        self.node = hetring.Node(conf, node_id=node_id, n_samples=n_samples,
                                 overrides=overrides, sync_first=sync_first,
                                 start_iter=start_iter,
                                 get_state=self._get_state,
                                 put_state=self._put, on_view=self._on_view,
                                 leave_flag=self._leave_flag)
        self._declare_matrices()
        self._resume_residual()
        self.left = False       # this node left the cluster (leave(), leave_on)
        self.skipped = 0        # steps skipped as not finite ([train] nonfinite = skip)
        for m in self.sync_bn:
            m._comm = self._allreduce
        if overlap:
            self._install_hooks()

    def _prepare_model(self, model, buffers, sync_bn, overlap):
        """Check the arguments about the model, convert its BatchNorm layers where asked, keep
        it (self.model, self.sync_bn); whether to overlap."""
        if buffers not in _BUFFER_MODES:
            raise ValueError(f"hetring.torch: buffers={buffers!r}: expected one of "
                             f"{', '.join(repr(m) for m in _BUFFER_MODES)}")
        if sync_bn:
            model = convert_sync_batchnorm(model)
        self.sync_bn = [m for m in model.modules() if isinstance(m, SyncBatchNorm)]
        if any(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules()):
            raise ValueError("hetring.torch: the model holds torch.nn.SyncBatchNorm, which needs "
                             "torch.distributed; use Trainer(sync_bn=True) or "
                             "hetring.torch.convert_sync_batchnorm(model) instead")
        if self.sync_bn and overlap:
            raise ValueError("hetring.torch: overlap=True cannot go with synchronised BatchNorm "
                             "(its all-reduces in backward would meet the gradient buckets on the "
                             "ring); leave overlap out or pass False")
        self.model = model
        return not self.sync_bn if overlap is None else overlap

    def _setup_params(self):
        """The parameters all-reduced, and where their gradients are staged."""
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.params = [p for _, p in named]
        for p in self.params:
            if not p.dtype.is_floating_point:
                raise ValueError(f"hetring.torch: parameters must be floating point, one is "
                                 f"{p.dtype}")
        self._param_names = [n for n, _ in named]
        self._numels = [p.numel() for p in self.params]  # the all-reduce's, from the first step
        self._stage()

    def _stage(self):
        """Where the gradients are staged, for the parameters' kinds and devices now."""
        # float32 CPU gradients are all-reduced in place; anything else through `staged`, one
        # float32 CPU buffer with a view per parameter (the same buffers, in number and size,
        # as in place: nodes with and without a GPU can share a cluster)
        self.staged = None
        if any(p.dtype != torch.float32 or p.device.type != "cpu" for p in self.params):
            self.staged = torch.zeros(sum(p.numel() for p in self.params), dtype=torch.float32)
        # the GPUs the parameters are on (a model split over several), each synchronised
        self._cuda = sorted({p.device for p in self.params if p.device.type == "cuda"}, key=str)
        self._kinds = [(p.dtype, p.device) for p in self.params]

    def _check_params(self):
        """The parameters and buffers as step() finds them. What the all-reduce carries is fixed
        when the Trainer is made (its layout, from the first step on), so a parameter that
        requires grad now but did not then, one assigned anew, one whose size changed, and a
        buffer carried that was dropped or resized since are refused by name (a gradient left
        out would stay this node's own, and the replicas would differ; a buffer registered
        since is not carried, but hashed, as before); parameters converted or
        moved since (model.double(), model.to(device)) are staged anew, and buffers that such a
        conversion replaced (of another kind or device) are carried in their place."""
        mine = set(map(id, self.params))
        new = [n for n, p in self.model.named_parameters() if p.requires_grad and id(p) not in mine]
        now = set(map(id, self.model.parameters()))
        gone = [n for n, p in zip(self._param_names, self.params) if id(p) not in now]
        sized = [f"{n!r} ({k} elements, now {p.numel()})" for n, p, k in
                 zip(self._param_names, self.params, self._numels) if p.numel() != k]
        new, gone = [repr(n) for n in new], [repr(n) for n in gone]
        cur = dict(self.model.named_buffers())
        bufs = [(n, cur.get(n)) for n, _ in self.carried_buffers]  # by name: those carried
        lost = [f"{n!r} ({_real(u).numel()} elements, now "
                f"{'none' if t is None else _real(t).numel()})"
                for (n, t), (_, u) in zip(bufs, self.carried_buffers)
                if t is None or _real(t).numel() != _real(u).numel()]
        if new or gone or sized or lost:
            either = [n for n in new if n in gone]
            what = [f"{', '.join(names)} {how}" for names, how in (
                (either, "was assigned a new tensor"),
                ([n for n in new if n not in either],
                 "requires grad now but did not when the Trainer was made"),
                ([n for n in gone if n not in either], "is no longer the model's"),
                (sized, "changed size"),
                ([f"the buffer {x}" for x in lost], "was dropped or resized")) if names]
            raise RuntimeError(
                f"hetring.torch: the model changed since the Trainer was made, whose all-reduce "
                f"takes the parameters that required grad and the buffers there were then: "
                f"{'; '.join(what)}. Make every parameter you will train require grad before the "
                f"Trainer (leave it out of the optimizer until then), keep its buffers, change "
                f"tensors in place (copy_), or save() and make a new Trainer")
        swapped = [(n, t, u) for (n, t), (_, u) in zip(bufs, self.carried_buffers) if t is not u]
        for n, t, u in swapped:
            if (t.dtype, t.device) == (u.dtype, u.device):
                raise RuntimeError(f"hetring.torch: the buffer {n!r} is no longer the model's: a "
                                   f"new tensor was assigned to it (only a conversion of the "
                                   f"model, model.double() or model.to(device), may replace "
                                   f"buffers); change buffers in place (copy_, add_, mul_, ...)")
        if swapped:  # replaced by a conversion (the same sizes): carry the new ones
            self.carried_buffers = bufs
        if [(p.dtype, p.device) for p in self.params] != self._kinds:
            self._stage()
            if self._hooks:  # before PyTorch 2.1 a hook is on the parameter's AccumulateGrad
                for _, handle in self._hooks:  # node, which a change of kind replaces
                    handle.remove()
                self._hooks = []
                self._install_hooks()

    def _declare_matrices(self):
        """Each parameter of two dimensions or more is a matrix of shape[0] rows (a linear
        layer's out x in, a convolution's out_channels x the rest), for [cluster] wire =
        powersgd; the buffers' changes are none. Harmless with another wire, and left out
        with a libhetring too old to take it (which then refuses wire = powersgd itself)."""
        if not getattr(self.node, "has_matrices", False):
            return
        shapes = [(p.shape[0], p.numel() // p.shape[0]) if p.dim() >= 2 and p.shape[0] else
                  (0, 0) for p in self.params]
        if self.carried is not None:
            shapes.append((0, 0))
        self.node.matrices(shapes)

    def _setup_buffers(self, buffers):
        """The model's buffers carried in the all-reduce, and the space for them."""
        # the buffers carried in the all-reduce (buffers != "off"), by name, each once: every
        # non-empty one, its changes a view of `carried` (float32 on the CPU), then a flag per
        # buffer and the agreement hash (_carry); the last buffer handed to the library
        self.carried_buffers = ([(n, t) for n, t in self.model.named_buffers() if t.numel()]
                                if buffers != "off" else [])
        self._n_vals = sum(_real(t).numel() for _, t in self.carried_buffers)
        n_buf = self._n_vals + len(self.carried_buffers) + 2 * _PIECES
        self.carried = (torch.zeros(n_buf, dtype=torch.float32) if self.carried_buffers
                        else None)
        self._agreed = {}  # this iteration's changes carried by agreement: index -> (at, new)
        self._carry_batch = None  # the hetring.Batch _carry weighed the changes for
        if buffers == "off":
            logging.getLogger("hetring.torch").warning(
                "hetring.torch: buffers='off': the model's buffers (BatchNorm's running "
                "statistics, ...) are neither made equal across nodes nor checked; each node "
                "keeps its own, and evaluations and checkpoints depend on the node")

    def _install_signals(self, leave_on):
        """Make this node leave when one of leave_on arrives (_LeaveOn), also while a call of
        the library blocks; close() gives them up."""
        if leave_on:
            _leave_on.add(self, tuple(leave_on))

    def _load(self, path):
        """Adopt a file of save(); its iteration. Opened without waiting in open(), as
        hr_file_open_read opens the C library's checkpoints: a FIFO or a device given where the
        file belongs is refused, never waited on."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(f"hetring.torch: checkpoint {path}: not a regular file (expected a "
                             f"checkpoint file of Trainer.save)")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as f:
            try:
                ck = pickle.load(f)  # a file of your own, as torch.load reads them
            except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as e:
                raise ValueError(f"hetring.torch: {path} is not a checkpoint of Trainer.save "
                                 f"({e})") from None
        if not isinstance(ck, dict) or ck.get("format") != _CKPT_FORMAT:
            raise ValueError(f"hetring.torch: {path} is not a checkpoint of Trainer.save")
        with torch.no_grad():
            load_state_bytes(self.model, self.optimizer, ck["state"], self.scheduler)
        self._resumed_residual = ck.get("residual")  # taken up once the node is open
        self._resumed_q = ck.get("powersgd_q")
        return int(ck["iter"])

    def _resume_residual(self):
        """A checkpoint's error-feedback residual (wire = bf16 or powersgd): this node's own is
        taken up again, another node's is not (it would be counted twice). Its powersgd Q is
        replicated state: taken up whoever wrote it."""
        r, self._resumed_residual = getattr(self, "_resumed_residual", None), None
        q, self._resumed_q = getattr(self, "_resumed_q", None), None
        log = logging.getLogger("hetring.torch")
        if q is not None and getattr(self.node, "has_powersgd_q", False):
            try:
                self.node.resume_powersgd_q(q)
                log.info("hetring.torch: resumed the powersgd Q from the checkpoint (%d floats)",
                         len(q))
            except hetring.Error as e:
                log.info("hetring.torch: the checkpoint's powersgd Q is not taken up: %s", e)
        if r is None or not getattr(self.node, "has_residual", False):
            return
        if r["node"] != self.node.node_id:
            log.info("hetring.torch: the checkpoint's error-feedback residual is node %d's, "
                     "not this node's: starting without one", r["node"])
            return
        try:
            self.node.resume_residual(r["values"])
        except hetring.Error as e:
            log.info("hetring.torch: the checkpoint's error-feedback residual is not taken up: "
                     "%s", e)
            return
        log.info("hetring.torch: resumed this node's error-feedback residual from the "
                 "checkpoint (%d floats)", len(r["values"]))

    def save(self, path):
        """The model, the optimizer and the iteration they are at, into path atomically
        (_write_replace: a temporary file in the same directory, fsync, rename, the directory
        fsynced): a crash leaves the old file or the new one."""
        ck = {"format": _CKPT_FORMAT, "iter": self.done,
              "state": state_bytes(self.model, self.optimizer, self.scheduler)}
        res = self.node.residual() if getattr(self.node, "has_residual", False) else None
        if res is not None:  # this node's own: only this node takes it up again (_load)
            ck["residual"] = {"node": self.node.node_id, "values": res}
            q = self.node.powersgd_q() if getattr(self.node, "has_powersgd_q", False) else None
            if q is not None:  # replicated: any node takes it up again
                ck["powersgd_q"] = q
        _write_replace(path, pickle.dumps(ck, protocol=4))

    def leave(self):
        """Leave the cluster at the next iteration boundary the members agree on: batches()
        then ends and .left is True. Safe from a signal handler and from any thread."""
        self._leave_flag.value = 1  # the node's flag: before it opens too
        if self.node is not None:
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
        `staged`. Contiguous also where the parameter is not (a transposed weight): the library
        reads memory order, which must be the logical order on every node, whether its .grad
        was made here (a node that joined) or kept from an earlier iteration."""
        targets, off = [], 0
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            elif not p.grad.is_contiguous():
                p.grad = p.grad.contiguous()
            if self.staged is None:
                targets.append(p.grad)
            else:
                targets.append(self.staged[off:off + p.numel()])
                off += p.numel()
        if self.carried is not None:
            targets.append(self.carried)  # the buffers' changes, last: in the first bucket
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
        live.handed = True  # before the calls: one that raises may have handed it over
        if live.carry_due:  # the buffers' changes first: they lead the first bucket
            live.carry_due = False
            self.node.ready(live.bufs, len(live.bufs) - 1)
        self.node.ready(live.bufs, k)

    def _get_state(self):
        """The committed state: a view change inside step() (a collective that failed) drops
        the iteration, so what its forward did to the buffers is undone first."""
        if self._packed is not None:  # the first view, the state as Trainer() packed it
            return self._packed
        self._restore()
        return state_bytes(self.model, self.optimizer, self.scheduler)

    def _put(self, data):
        self._packed = None
        with torch.no_grad():
            load_state_bytes(self.model, self.optimizer, data, self.scheduler)
        self._snap = None  # the state received replaces the iteration's

    def _on_view(self, v):
        self._packed = None  # on_view may change the model
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

    def step(self, loss_fn, batch, batch_size=None):
        """One iteration on batch = (inputs, targets) of this node's indices.

        The batch must hold exactly the samples of the indices batches() gave for the
        iteration (trainer.batch.batch of them): the all-reduce weights this node's gradient
        by that count, so a batch of another size (a DataLoader of its own batch size, a
        last batch cut short) mis-weights the global mean on every node without any error
        (the replicas stay equal). step() cannot tell on its own which dimension of your
        tensors runs over samples (dim 0, or dim 1 for sequence-first inputs): pass
        batch_size= (the samples in batch, counted along your batch dimension) and a batch
        of another size is refused with a ValueError before anything is computed (batches()
        gives the iteration again). trainer.loader() and DataLoader over trainer.sampler()
        build batches of exactly those indices.

        Returns the hetring Result (loss and accuracy over the global batch, this node's
        next batch size, its compute and communication seconds), or None when the view
        changed during the all-reduce: the iteration must run again (batches() gives its new
        indices), and nothing was applied. None too when this node left instead (a leave()
        or a leave_on signal was pending when a node failed in this iteration): nothing was
        applied, .left is True and batches() ends.

        An exception in forward, loss_fn or backward puts the buffers back as the iteration
        found them and is raised as it is; nothing of the iteration reached the others, and
        batches() gives the same iteration again (a loop that catches it may go on). Once
        backward's hooks handed gradients over (overlap) or a SyncBatchNorm all-reduce ran,
        the iteration can no longer run again: the node is closed, so that the others go on
        without it at once, and a RuntimeError says so. So too once the iteration is committed
        on every node: an exception in before_step, optimizer.step() or the scheduler's step
        (raised on this node alone, which would otherwise train on without the update the
        others applied) closes the node and a RuntimeError says so. A SIGINT (Ctrl-C) from the
        moment the library's step starts until the update is applied is held back and its
        KeyboardInterrupt raised once step() has applied the update (in the main thread, with
        a handler of Python's for SIGINT): the node stays a member, its model that of the
        others, and a loop that catches it may go on; a KeyboardInterrupt raised otherwise
        while the library runs the step closes the node and is raised as it is.

        A global gradient or loss that is not finite (a NaN or an inf in any node's share, or
        a sum that overflows) raises hetring.NonFinite on every node ([train] nonfinite =
        error, the default; .iter and .nodes say where), or with nonfinite = skip returns the
        Result with .skipped True: as AMP's GradScaler skips a step, the optimizer is not
        stepped and the buffers stay as the iteration found them, the iteration's samples
        count as used, the scheduler is stepped, and .skipped counts it.
        """
        if os.getpid() != self._pid:  # a forked child's hooks would hand gradients over first
            raise RuntimeError(f"hetring.torch: this Trainer belongs to process {self._pid}; "
                               f"process {os.getpid()}, forked from it, cannot use it (its "
                               f"node's ring connections are the parent's)")
        b = self.batch
        if b is None:
            raise RuntimeError("hetring.torch: step() without a batch from batches()")
        self.batch = None
        self._check_size(b, batch_size)
        self._check_params()  # nothing handed over yet: batches() gives the iteration again
        self.optimizer.zero_grad(set_to_none=False)
        # the replica hash of the state the iteration starts from, before forward changes
        # the buffers
        h = state_hash(self.model, self.buffer_mode != "off") if b.check_hash else 0
        self._snap = [(t, t.detach().clone()) for t in self.model.buffers()]
        self._comm_s, self._view_changed, self._left_now = 0.0, False, False
        self._collectives = 0
        t0 = self.clock()
        live = self._live = self._buffers()
        try:
            loss_sum, correct = self._compute(loss_fn, batch, b, live)
        except BaseException as e:
            self._live = None
            self._restore()  # the buffers as the iteration found them, whatever happened
            if self._view_changed:
                if self._left_now:
                    self.left = True  # this node left instead (batches() ends)
                return None  # a collective of sync BN saw the view change: the iteration again
            if live.handed or self._collectives:
                raise self._abandon(b, e)
            raise  # nothing reached the ring: batches() gives this iteration again
        self._live = None
        for dev in self._cuda:  # the compute time includes the kernels still queued
            torch.cuda.synchronize(dev)
        # above 0 (a coarse clock can read 0), as hetring_step requires
        compute_s = max(1e-9, self.clock() - t0 - self._comm_s)
        self._live = live
        for k in range(len(self.params)):
            if not live.given[k]:
                self._collect(k)  # no hook ran for it (overlap off, or unused in this graph)
        if self.carried is not None and not live.given[-1]:
            self._carry(b, live, hand_over=False)
        self._live = None
        with _HoldInterrupt():  # from the library's step to the update applied: no window
            return self._ring_step(b, live, compute_s, loss_sum, correct, h)

    @staticmethod
    def _check_size(b, batch_size):
        """batch_size (where step() was given one) against this node's share of iteration b,
        before anything is computed: batches() then gives the iteration again."""
        if batch_size is None:
            return
        try:
            n = operator.index(batch_size)
        except TypeError:
            raise TypeError(f"hetring.torch: step(batch_size=...) takes the number of samples "
                            f"in the batch, an int, not {type(batch_size).__name__}") from None
        if n != b.batch:
            raise ValueError(
                f"hetring.torch: iteration {b.iter}: step() was given a batch of {n} samples "
                f"(batch_size={n}), but this node's share of the iteration is {b.batch} "
                f"samples (the indices batches() gave, trainer.batch.batch): the all-reduce "
                f"weights this node's gradient by its share, so that batch would mis-weight "
                f"the global mean on every node. Build the batch from exactly those indices "
                f"(nothing was computed; batches() gives the iteration again)")

    def _ring_step(self, b, live, compute_s, loss_sum, correct, h):
        """The library's step (the all-reduce and the commit), then the update applied where
        the iteration was committed: what step() returns."""
        try:
            res = self.node.step(live.bufs, compute_s, loss_sum, correct, h)
        except hetring.NonFinite:
            self._restore()  # nothing of the iteration is applied on any node
            raise
        except hetring.Left:
            # a leave was pending when a node failed in the all-reduce: this node left in the
            # view change instead of running the iteration again; nothing of it is applied
            self._restore()
            self.left = True
            return None
        except hetring.Error as e:
            if e.status != hetring._lib.EMISMATCH or not b.check_hash:
                raise
            raise hetring.Error(e.status, f"{e}; on this hash iteration hetring.torch hashed "
                                f"every parameter and "
                                f"{'buffer' if self.buffer_mode != 'off' else 'no buffer'} "
                                f"(buffers={self.buffer_mode!r})") from None
        except BaseException as e:
            if isinstance(e, Exception):  # a callback's, raised again once the library returned
                raise
            # a KeyboardInterrupt while the library ran the step: whether the others committed
            # the iteration is unknown, and a loop that caught it would train on apart from them
            self._restore()
            self.node.close()
            raise
        if res is None:
            self._restore()  # the iteration runs again from the buffers it found
            return None
        if res.skipped:  # not finite, nonfinite = skip: committed, nothing of it applied
            self._restore()
            self.skipped += 1
            self._apply_step(b, res, live, applied=False)
            return res
        self._apply_step(b, res, live, applied=True)
        return res

    def _apply_step(self, b, res, live, applied):
        """What every node does once the iteration is committed: the buffers' update, the
        optimizer's step (where applied) and the scheduler's; self.done moves on. The buffers'
        errors are the same on every node (nothing applied anywhere); anything else that raises
        does so on one node only, which going on would leave behind the others, training
        replicas that differ: its node is closed (_abandon)."""
        where, same = "the update of the buffers", None
        try:
            if applied:
                try:
                    self._apply_buffers()
                except Exception as e:
                    same = e
                    raise
                where = "the copy of the global gradient to the parameters' .grad"
                if self.staged is not None:
                    for p, v in zip(self.params, live.targets):
                        p.grad.copy_(v.view_as(p.grad))  # the global mean, in the parameter's kind
                if self.before_step is not None:
                    where = "before_step"
                    self.before_step(self)
                where = "optimizer.step()"
                self.optimizer.step()
            if self.scheduler is not None:
                where = "scheduler.step()"
                self.scheduler.step()  # skipped steps too: as AMP's loops do
        except BaseException as e:
            if e is same:
                raise
            raise self._abandon(b, e, committed=where)
        self.done = res.iter + 1

    def _abandon(self, b, e, committed=False):
        """An exception in forward, loss_fn or backward after this node handed gradients over
        (hetring_ready) or took part in a collective of the iteration: the others hold its
        part and wait for the rest, which it cannot take back or give. Or one after the
        iteration was committed on every node (committed: where it was raised), which this
        node cannot apply as the others do. Its node is closed, so that they form a view
        without it at once (and it cannot train on apart from them), and the error says so (e
        itself where it is no Exception)."""
        self.node.close()
        if not isinstance(e, Exception):
            return e
        if committed:
            what = (f"raised in {committed} after every node had committed the iteration, "
                    f"whose update this node cannot apply as the others do (its model and "
                    f"optimizer may hold part of it)")
        else:
            what = ("handed gradients to the all-reduce" if self._collectives == 0 else
                    "taken part in a SyncBatchNorm all-reduce")
            what = (f"raised after this node had {what} of the iteration, which it can "
                    f"neither take back nor finish")
        err = RuntimeError(
            f"hetring.torch: iteration {b.iter}: {type(e).__name__} {what}: this node left the "
            f"cluster (its node is closed; the others go on without it; a new Trainer joins "
            f"again and receives their state): {e}")
        err.__cause__ = e
        return err

    def _compute(self, loss_fn, batch, b, live):
        """Forward and backward of this node's share; (loss sum, correct predictions). With
        synchronised BatchNorm an empty share runs them on an empty batch, to take part in
        the layers' all-reduces."""
        loss_sum, correct = 0.0, 0
        if b.batch > 0:
            x, y = batch
            if self.sync_bn and torch.is_tensor(x) and torch.is_tensor(y):
                self._empty = (x[:0], y[:0])
            out = self.model(x)
            self._carry(b, live)
            loss = loss_fn(out, y)
            (loss * b.batch).backward()  # the mean over b samples, as their sum
            loss_sum = float(loss.detach()) * b.batch
            if y.dtype in _INT_TYPES and out.dim() == 2:
                correct = int((out.detach().argmax(1) == y).sum())
        elif self.sync_bn:
            x = batch[0] if batch is not None else None
            if not torch.is_tensor(x):
                if self._empty is None:
                    raise RuntimeError("hetring.torch: an empty share with synchronised "
                                       "BatchNorm needs an empty batch of the input's shape: "
                                       "pass (x[:0], y[:0]) to step() (trainer.batches() "
                                       "gives empty indices that make one)")
                x = self._empty[0]
            out = self.model(x)
            self._carry(b, live)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            zero = sum(o.float().sum() for o in outs if torch.is_tensor(o) and o.requires_grad)
            if torch.is_tensor(zero):
                (zero * 0.0).backward()  # no samples: every gradient 0, the all-reduces taken
        return loss_sum, correct

    def _carry(self, b, live, hand_over=True):
        """What forward did to the buffers, into `carried` with its weight: b x (new - old)
        ("average"; 0 for an empty share), B x (new - old) on the lowest member ("lowest");
        with overlap on, handed over by the first backward hook (the buffers are final
        before backward; not at once, so that an exception in loss_fn or before the first
        gradient leaves nothing with the library and the iteration can run again).

        An element whose bits forward left alone carries 0, whatever it holds (inf, NaN). A
        change float32 cannot carry as a number (an inf or NaN in the old or the new value, a
        change beyond float32's range over B, an integer step over _INT_STEP) carries 0 too,
        and its buffer's flag 1; every member's flagged positions and new values go into one
        hash, sent in pieces, so that _apply_buffers can take them only where every member
        made the same. `carried` never holds anything but finite numbers."""
        if self.carried is None:
            return
        snap = dict((id(t), old) for t, old in self._snap)
        w = float(b.batch) if self.buffer_mode == "average" else \
            (float(b.global_batch) if b.rank == 0 else 0.0)
        B, nb = float(b.global_batch), len(self.carried_buffers)
        flags = self.carried[self._n_vals:self._n_vals + nb]
        pieces = self.carried[self._n_vals + nb:]
        digest, off = hashlib.blake2b(digest_size=8), 0
        self._agreed, self._carry_batch = {}, b
        now = dict(self.model.named_buffers())
        with torch.no_grad():
            for k, (name, t) in enumerate(self.carried_buffers):
                if now.get(name) is not t:
                    raise RuntimeError(f"hetring.torch: the buffer {name!r} is no longer the "
                                       f"model's: forward assigned a new tensor to it; change "
                                       f"buffers in place (copy_, add_, mul_, ...)")
                new, old = _real(t.detach()).reshape(-1), _real(snap[id(t)]).reshape(-1)
                n = new.numel()
                moved = _bits(new) != _bits(old)
                d = (new.double() - old.double()).masked_fill_(~moved, 0.0)
                a = d.abs()
                if new.dtype.is_floating_point:
                    far = moved & ~(a * B <= _FLT_MAX)  # NaN compares false: far
                else:
                    far = (a > _INT_STEP) | (a * B > _INT_SUM)
                flags[k] = 0.0
                if bool(far.any()):
                    at = far.nonzero().reshape(-1)
                    got = new[at].clone()
                    self._agreed[k] = (at, got)
                    d[at] = 0.0
                    flags[k] = 1.0
                    digest.update(k.to_bytes(4, "little"))
                    digest.update(at.cpu().numpy().tobytes())
                    digest.update(_bits(got).cpu().numpy().tobytes())
                self.carried[off:off + n].copy_(d * w)  # w 0: nothing of this node's
                off += n
            h = int.from_bytes(digest.digest(), "little") if self._agreed else 0
            x = torch.tensor([(h >> (_PIECE_BITS * i)) & ((1 << _PIECE_BITS) - 1)
                              for i in range(_PIECES)], dtype=torch.float32)
            pieces[:_PIECES].copy_(x)
            pieces[_PIECES:].copy_(x * x)
        live.given[-1] = True
        live.carry_due = hand_over and bool(self._hooks)

    def _uncarried(self, b):
        """The buffers whose changes cannot be taken after the all-reduce (flags and pieces
        come back divided by B): those flagged on some members and not others, or on every
        member with hashes that differ. The same names on every node."""
        nb, M, B = len(self.carried_buffers), b.size, float(b.global_batch)
        back = [round(float(v) * B) for v in self.carried[self._n_vals:]]
        flags, s, q = back[:nb], back[nb:nb + _PIECES], back[nb + _PIECES:]
        alike = all(M * q[i] == s[i] * s[i] for i in range(_PIECES))
        return [(k, f) for k, f in enumerate(flags) if f != 0 and (f != M or not alike)]

    def _refuse_buffers(self, b, bad):
        """The error for the buffers _uncarried named, with what this node did to them."""
        lines = []
        for k, f in bad:
            name, t = self.carried_buffers[k]
            mine = "none here"
            if k in self._agreed:
                at, got = self._agreed[k]
                old = _real(dict((id(u), o) for u, o in self._snap)[id(t)]).reshape(-1)
                i = int(at[0])
                mine = (f"{at.numel()} here, the first at flat index {i}: "
                        f"{float(old[i])!r} -> {float(got[0])!r}")
            what = (f"on {f} of {b.size} nodes" if f != b.size
                    else "on every node, but not alike (positions or values differ)")
            lines.append(f"{name!r} ({t.dtype}) {what} ({mine})")
        return RuntimeError(
            f"hetring.torch: iteration {b.iter}: forward made changes to buffers that the "
            f"all-reduce cannot average (inf or NaN in the old or the new value, a change "
            f"beyond float32's range, an integer step over {_INT_STEP}), and such a change is "
            f"taken only where every node made the same: {'; '.join(lines)}. Make forward "
            f"change these buffers alike on every node, or leave them unchanged, or pass "
            f"buffers='off'")

    def _apply_buffers(self):
        """Every node's buffers from the all-reduced change: old + sum_k w_k (new_k - old) / B,
        integer ones rounded; an element whose mean change is 0 keeps its old bits, one carried
        by agreement takes the new value every member gave it. The same bytes on every node;
        on an error none is written and the buffers are put back as the iteration found them."""
        if self.carried is None:
            self._snap = None
            return
        b = self._carry_batch
        bad = self._uncarried(b)
        if bad:
            err = self._refuse_buffers(b, bad)
            self._restore()
            raise err
        snap = dict((id(t), old) for t, old in self._snap)
        out, off = [], 0
        with torch.no_grad():
            for k, (name, t) in enumerate(self.carried_buffers):
                old = _real(snap[id(t)]).reshape(-1)
                n = old.numel()
                d = self.carried[off:off + n].to(old.device).double()
                off += n
                if old.dtype.is_floating_point:
                    r = (old.double() + d).to(old.dtype)
                    moved = d != 0
                    if not bool(torch.isfinite(r[moved]).all()):
                        self._restore()
                        raise RuntimeError(
                            f"hetring.torch: iteration {b.iter}: the nodes' mean of the buffer "
                            f"{name!r} is not finite in {old.dtype}, though every node's value "
                            f"of it was")
                    new = torch.where(moved, _bits(r), _bits(old)).view(old.dtype)
                else:
                    rd = d.round()
                    if float((d - rd).abs().max()) > 1e-3:
                        self._restore()
                        raise RuntimeError(
                            f"hetring.torch: the nodes changed the integer buffer "
                            f"{name} by different amounts in one iteration "
                            f"(weighted mean change {d[:4].tolist()}); integer "
                            f"buffers must change alike on every node")
                    new = old + rd.to(old.dtype)
                if k in self._agreed:
                    at, got = self._agreed[k]
                    new[at] = got
                out.append((t, new))
            for t, new in out:
                _real(t).copy_(new.view(_real(t).shape))
        self._snap, self._agreed = None, {}

    def _restore(self):
        """The buffers back as the iteration found them (it is dropped)."""
        snap, self._snap = self._snap, None
        with torch.no_grad():
            for t, old in snap or ():
                t.copy_(old)

    def _allreduce(self, t):
        """A SyncBatchNorm's all-reduce of a float32 tensor, in place (through a CPU copy when
        t is elsewhere); a view change drops the iteration."""
        t0 = self.clock()
        self._collectives += 1  # the others take part in it: no running the iteration again
        host = t if t.device.type == "cpu" and t.is_contiguous() else t.cpu().contiguous()
        try:
            ok = self.node.allreduce(host.data_ptr(), host.numel())
        except hetring.Left:  # a leave was pending when a node failed: this node left
            self._view_changed = self._left_now = True
            raise _ViewChanged("this node left during a SyncBatchNorm all-reduce") from None
        if ok and host is not t:
            t.copy_(host)
        self._comm_s += self.clock() - t0
        if not ok:
            self._view_changed = True
            raise _ViewChanged("the view changed during a SyncBatchNorm all-reduce")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """close(): also on an exception or a KeyboardInterrupt, which then goes on up; this
        node leaves the ring at once and the others go on without it."""
        self.close()

    def close(self):
        """Leave the ring now (the others go on without this node) and give back the
        leave_on signals and the hooks (idempotent)."""
        _leave_on.remove(self)
        for _, handle in self._hooks:
            handle.remove()
        self._hooks = []
        if self.node is not None:
            self.node.close()
