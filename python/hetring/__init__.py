"""hetring: dynamic batching and elastic ring all-reduce for your own training loop.

A pure-Python binding (ctypes) of libhetring (hetring.h). One Node is one process of the
cluster an INI file describes:

    node = hetring.Node("cluster.ini", node_id=0, n_samples=len(dataset))
    while (batch := node.next()) is not None:      # None: the run is done
        grads = ...  # gradient SUMS over dataset[batch.indices], float32, one or more buffers
        res = node.step(grads, compute_s, loss_sum)
        if res is None:                            # the view changed: run the iteration again
            continue
        ...                                        # grads now hold the global mean: step

hetring.torch wraps this for a PyTorch model and optimizer (a sampler, a step helper, the
state transfer of model and optimizer when a node joins).

Errors raise hetring.Error (with .status); a node that left raises hetring.Left, a step whose
global gradient or loss is not finite hetring.NonFinite ([train] nonfinite = error; with skip,
step() returns a Result whose .skipped is True: do not apply it).
The library is found through HETRING_LIB, next to this package, or on the system path.
"""
import array
import ctypes
import operator
import os

from . import _lib

__version__ = "0.3.1"
__all__ = ["Node", "Error", "Left", "NonFinite", "Batch", "ini_text", "library_version",
           "hash_bytes", "__version__"]

_L = None


def _check_version(found, path):
    """The library must be of this package's major.minor version: the structures the binding
    passes (options, batch, grads, result) are that version's."""
    if found.split(".")[:2] != __version__.split(".")[:2]:
        raise OSError(f"hetring {__version__}: {path} is libhetring {found}, whose structures "
                      f"differ; install libhetring {__version__} (or set HETRING_LIB to it)")


def _lib_handle():
    global _L
    if _L is None:
        L = _lib.load()
        _check_version(L.hetring_version().decode(), L.path)
        _L = L
    return _L


def _ini_value(section, key, v):
    if isinstance(v, bool) or v is None or isinstance(v, (dict, set)):
        raise ValueError(f"hetring: [{section}] {key} = {v!r}: expected a number, a string or "
                         f"a list of numbers")
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    s = str(v)
    if "\n" in s or "\0" in s:
        raise ValueError(f"hetring: [{section}] {key}: a value is one line of text")
    return s


def ini_text(config):
    """The INI text of a cluster given as a mapping, for Node(conf=mapping).

    config maps a section name ("cluster", "train", "controller", "node.0", ...) to a mapping
    of its keys; "nodes" may instead list the nodes in id order, each a mapping of its keys
    (host, port, slowdown, ...). Lists become comma-separated values (layers = [784, 32, 10]).
    """
    lines = []
    for section, keys in config.items():
        if section == "nodes":
            continue
        if not isinstance(keys, dict):
            raise ValueError(f"hetring: [{section}]: expected a mapping of keys, got {keys!r}")
        lines.append(f"[{section}]")
        lines += [f"{k} = {_ini_value(section, k, v)}" for k, v in keys.items()]
    for i, keys in enumerate(config.get("nodes", ())):
        if f"node.{i}" in config:
            raise ValueError(f"hetring: node {i} is given both in nodes and as [node.{i}]")
        lines.append(f"[node.{i}]")
        lines += [f"{k} = {_ini_value(f'node.{i}', k, v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def library_version():
    """The version of the libhetring this package loaded."""
    return _lib_handle().hetring_version().decode()


def _check_memory(call, address, n, unit):
    """The memory a raw-address call hands the library: n (in unit) must be 0 or more (the
    library takes a size_t, where -1 reads as 2^64 - 1) at an address above 0, or 0 with n 0.
    Refused here by name: the library would read or write n of them, or take them for none.
    Returns (address, n) as ints (numpy's integers taken, floats not)."""
    try:
        a, n = operator.index(0 if address is None else address), operator.index(n)
    except TypeError:
        raise TypeError(f"hetring: {call}(address={address!r:.40}, {unit}={n!r:.40}): expected "
                        f"integers (t.data_ptr(), t.numel())") from None
    if n < 0 or a < 0 or (a == 0 and n > 0):
        raise ValueError(f"hetring: {call}(address={a}, {unit}={n}): {unit} must be 0 or more, "
                         f"at an address above 0 (0 only with {unit} 0)")
    return a, n


def hash_bytes(address, nbytes, seed=0):
    """hetring_hash of nbytes at address (chain buffers through seed)."""
    address, nbytes = _check_memory("hash_bytes", address, nbytes, "nbytes")
    return _lib_handle().hetring_hash(ctypes.c_void_p(address), nbytes, seed)


class Error(RuntimeError):
    """A libhetring call failed; .status is the hetring_status."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class Left(Error):
    """This node left the cluster (Node.leave)."""


class NonFinite(Error):
    """A step's global gradient or loss was not finite ([train] nonfinite = error): every node
    stops. .iter is the iteration, .nodes the ids of the nodes whose share was not finite, with
    the error-feedback residual of a lossy wire added (empty: every share was finite and their
    sum overflowed)."""

    def __init__(self, status, message, iter, nodes):
        super().__init__(status, message)
        self.iter, self.nodes = iter, nodes


class Batch:
    """This node's part of one iteration."""

    __slots__ = ("iter", "epoch", "global_batch", "batch", "start", "indices", "rank", "size",
                 "check_hash", "view_changed", "slowdown")

    def __repr__(self):
        return (f"Batch(iter={self.iter}, epoch={self.epoch}, batch={self.batch}/"
                f"{self.global_batch}, rank={self.rank}/{self.size})")


class Result:
    """What an iteration did (the same on every node but the t_ fields). skipped: its global
    gradient or loss was not finite and [train] nonfinite = skip: the iteration is done but its
    gradient must not be applied; nonfinite_nodes: the nodes whose share was not finite."""

    __slots__ = ("iter", "loss", "accuracy", "next_batch", "changed", "t_compute", "t_node",
                 "t_comm", "buckets", "early", "skipped", "nonfinite_nodes")

    def __init__(self):
        self.skipped, self.nonfinite_nodes = False, []  # a step applied unless said otherwise


def _fact(fn):
    """A read-only property of a Node: the library's function fn of its handle."""
    return property(lambda self: getattr(self._L, fn)(self._h))


class Node:
    """One node of the cluster in `conf`: an INI file, or a mapping of its sections (ini_text).

    node_id: the [node.ID] of this process (None: HETRING_NODE or a launcher's rank).
    n_samples: the size of your training set (0: the INI's [train] samples).
    overrides: "section.key=value" strings, applied over the INI.
    get_state() -> bytes and put_state(bytes): your training state, moved to a node that joins
    and hash-checked on every member (both or neither). on_view(dict): a view was installed
    (epoch, nodes, rank, iter, state_bytes, left, joined: node ids, change_s: seconds).
    sync_first: the first view sends the lowest member's state to every member.
    start_iter: the iteration your state is at when you resumed your own checkpoint (0: a new
    run); the first view takes the state of the node furthest along.
    leave_flag: None, or a ctypes.c_int of yours (hetring.h, leave_flag) that leave() sets
    too: setting it nonzero, from any thread and even while a call of this node blocks (open
    waiting for its peers, an election waiting for a quorum), makes the node leave as leave()
    does; open then raises Left. Keep it as long as the node.
    A node is its process's: in a child forked from it (a DataLoader worker, os.fork) its calls
    raise Error, and close() (or the garbage collector) only lets go of the child's copy.
    """

    def __init__(self, conf, node_id=None, n_samples=0, overrides=(), get_state=None,
                 put_state=None, on_view=None, sync_first=True, start_iter=0, leave_flag=None):
        L = _lib_handle()
        self._L = L
        self._h = ctypes.c_void_p()
        self._pid = os.getpid()  # the process whose ring this is (_own)
        self._keep = None  # the bytes get_state returned last (the library reads them)
        self._pending = None  # an exception raised in a callback
        self._get, self._put, self._view = get_state, put_state, on_view
        o = _lib.Options()
        L.hetring_options_init(ctypes.byref(o))
        if isinstance(conf, dict):
            self._text = ini_text(conf).encode()
            o.conf_text = self._text
        else:
            o.conf = os.fsencode(conf)
        o.node_id = -1 if node_id is None else int(node_id)
        o.n_samples = int(n_samples)
        if isinstance(overrides, (str, bytes)) or \
                not all(isinstance(s, (str, bytes)) for s in overrides):
            raise TypeError(f"hetring: overrides is {overrides!r:.60}; expected a list of "
                            f"'section.key=value' strings, e.g. ['train.lr=0.1']")
        sets = [os.fsencode(s) for s in overrides] + [None]
        self._sets = (ctypes.c_char_p * len(sets))(*sets)
        o.set = self._sets
        o.sync_first = 1 if sync_first else 0
        o.start_iter = int(start_iter)
        self._leave_flag = leave_flag  # the library polls it until close
        if leave_flag is not None:
            if not isinstance(leave_flag, ctypes.c_int):
                raise TypeError(f"hetring: leave_flag is {type(leave_flag).__name__}; expected "
                                f"a ctypes.c_int (a sig_atomic_t)")
            o.leave_flag = ctypes.addressof(leave_flag)
        # the callbacks live as long as the node: the library calls them until close
        self._cbs = (_lib.GET_STATE(self._cb_get) if get_state else _lib.GET_STATE(),
                     _lib.PUT_STATE(self._cb_put) if put_state else _lib.PUT_STATE(),
                     _lib.ON_VIEW(self._cb_view) if on_view else _lib.ON_VIEW())
        o.cb.get_state, o.cb.put_state, o.cb.on_view = self._cbs
        err = ctypes.create_string_buffer(1024)
        st = L.hetring_open(ctypes.byref(self._h), ctypes.byref(o), err, len(err))
        try:
            self._reraise()  # a callback's exception: open may have succeeded all the same
            if st == _lib.LEFT:  # leave_flag set while open waited for its peers
                raise Left(st, f"hetring: {err.value.decode(errors='replace')}")
            if st != _lib.OK:
                raise Error(st, f"hetring: {err.value.decode(errors='replace')}")
            self._batch = _lib.Batch()
            self._res = _lib.Result()
            self._grads = _lib.Grads()
            self._given = None  # the buffers list of this iteration's ready() calls
        except BaseException:
            self.close()  # the node leaves now, not when a garbage collection finds it
            raise

    # -------------------------------------------------------------- callbacks
    def _cb_get(self, user, data, nbytes):
        try:
            b = bytes(self._get())
            self._keep = ctypes.create_string_buffer(b, len(b)) if b else None
            data[0] = ctypes.cast(self._keep, ctypes.c_void_p).value if b else None
            nbytes[0] = len(b)
            return 0
        except BaseException as e:  # raised again once the library returns
            self._pending = e
            return -1

    def _cb_put(self, user, data, nbytes):
        try:
            self._put(ctypes.string_at(data, nbytes) if nbytes else b"")
            return 0
        except BaseException as e:
            self._pending = e
            return -1

    def _cb_view(self, user, v):
        try:
            v = v.contents
            self._view({"epoch": v.epoch, "nodes": [v.ids[k] for k in range(v.n)],
                        "rank": v.rank, "iter": v.iter, "state_bytes": v.state_bytes,
                        "left": [v.left[k] for k in range(v.n_left)],
                        "joined": [v.joined[k] for k in range(v.n_joined)],
                        "change_s": v.change_s})
        except BaseException as e:
            self._pending = e

    def _reraise(self):
        if self._pending is not None:
            e, self._pending = self._pending, None
            raise e

    def _own(self):
        """Refuse a call of a forked child (a DataLoader worker, os.fork): the node's ring
        links, threads and listening port are its parent's, and a call would take part in the
        parent's collectives on the same connections."""
        if os.getpid() != self._pid:
            raise Error(_lib.EINVAL, f"hetring: this node belongs to process {self._pid}; "
                                     f"process {os.getpid()}, forked from it, cannot use it "
                                     f"(the ring's connections are the parent's): open a Node "
                                     f"of its own, or start workers with the spawn method")

    def _fail(self, st):
        if not self._h:
            raise Error(st, "hetring: this node was closed (Node.close()); open another Node")
        msg = self.last_error() or self._L.hetring_strerror(st).decode()
        if st == _lib.LEFT:
            raise Left(st, msg)
        raise Error(st, f"hetring: {msg}")

    # -------------------------------------------------------------- iterations
    def next(self):
        """This node's Batch of the next iteration, or None when the run is done."""
        self._own()
        st = self._L.hetring_next(self._h, ctypes.byref(self._batch))
        self._reraise()
        if st == _lib.DONE:
            return None
        if st != _lib.OK:
            self._fail(st)
        c = self._batch
        b = Batch()
        for f in Batch.__slots__:
            if f != "indices":
                setattr(b, f, getattr(c, f))
        b.indices = c.indices[:c.batch] if c.batch else []
        return b

    @staticmethod
    def _check_buffers(buffers):
        """buffers must be a non-empty list of (address, float32 count) pairs: refuse anything
        else by name, where ctypes said only "cannot unpack non-iterable ..." (a numpy array
        or a tensor passed as it is) or let a null address through. Address 0 goes with a
        count of 0 (an empty tensor's data_ptr()), as the library takes it."""
        how = ("expected a list of (address, float32 count) pairs, e.g. "
               "[(t.data_ptr(), t.numel())] for a float32 tensor t")
        if not isinstance(buffers, (list, tuple)):
            raise TypeError(f"hetring: buffers is a {type(buffers).__name__}; {how}")
        if len(buffers) == 0:
            raise ValueError(f"hetring: buffers is empty; {how}")
        for i, b in enumerate(buffers):
            ok = isinstance(b, (tuple, list)) and len(b) == 2 and \
                all(isinstance(x, int) and not isinstance(x, bool) for x in b)
            if not ok:
                raise TypeError(f"hetring: buffers[{i}] is {type(b).__name__} {b!r:.60}; {how}")
            if b[0] < 0 or b[1] < 0 or (b[0] == 0 and b[1] > 0):
                raise ValueError(f"hetring: buffers[{i}] = ({b[0]}, {b[1]}): the address must "
                                 f"be above 0 (0 only with a count of 0) and the count 0 or "
                                 f"more; {how}")

    def _set_buffers(self, buffers):
        self._check_buffers(buffers)
        n = len(buffers)
        g = self._grads
        self._bufs = (ctypes.c_void_p * n)(*[a for a, _ in buffers])
        self._counts = (ctypes.c_size_t * n)(*[c for _, c in buffers])
        g.bufs, g.counts, g.n_bufs = self._bufs, self._counts, n

    def _floats_out(self, fn):
        """The floats a hetring_residual-like call hands out, as an array.array of float32,
        or None where there are none."""
        n = fn(self._h, None, 0)
        if n <= 0:
            return None
        buf = (ctypes.c_float * n)()
        if fn(self._h, buf, n) != n:
            return None
        return array.array("f", bytes(buf))

    def _floats_in(self, fn, values):
        """values (floats) to a hetring_resume_residual-like call; its failure raised."""
        self._own()
        a = array.array("f", values)
        buf = (ctypes.c_float * len(a)).from_buffer(a)
        st = fn(self._h, buf, len(a))
        self._reraise()
        if st != _lib.OK:
            self._fail(st)

    def residual(self):
        """This node's error-feedback residual (wire = bf16 or powersgd) as an array.array of
        float32, or None where it has none (hetring.h, hetring_residual): this node's own, for its
        checkpoint; give it back with resume_residual() to this node only."""
        if not self._L.has_residual:
            return None
        return self._floats_out(self._L.hetring_residual)

    def resume_residual(self, values):
        """Take up this node's residual from its checkpoint before the first step (hetring.h,
        hetring_resume_residual); values: floats, as residual() gave them. Raises Error with
        status SKIPPED, nothing taken up, where the cluster is past the checkpoint's iteration
        (start_iter): the steps since were applied with or without it."""
        if not self._L.has_residual:
            raise Error(_lib.EINVAL, f"hetring: {self._L.path} has no hetring_resume_residual "
                                     f"(a libhetring older than this package's)")
        self._floats_in(self._L.hetring_resume_residual, values)

    def powersgd_q(self):
        """The powersgd wire's Q as an array.array of float32, or None where there is none
        (hetring.h, hetring_powersgd_q): replicated state, the same on every node, for the
        checkpoint beside the residual."""
        if not self._L.has_powersgd_q:
            return None
        return self._floats_out(self._L.hetring_powersgd_q)

    def resume_powersgd_q(self, values):
        """Start the first view's Q from a checkpoint's before the first step (hetring.h,
        hetring_resume_powersgd_q); values: floats, as powersgd_q() gave them."""
        if not self._L.has_powersgd_q:
            raise Error(_lib.EINVAL, f"hetring: {self._L.path} has no hetring_resume_powersgd_q "
                                     f"(a libhetring older than this package's)")
        self._floats_in(self._L.hetring_resume_powersgd_q, values)

    @property
    def has_powersgd_q(self):
        """The library hands out the powersgd Q (powersgd_q(), resume_powersgd_q())."""
        return self._L.has_powersgd_q

    @property
    def has_residual(self):
        """The library hands out the residual (residual(), resume_residual())."""
        return self._L.has_residual

    @property
    def has_matrices(self):
        """The library takes matrices (matrices()); a libhetring older than this package's
        does not."""
        return self._L.has_matrices

    def matrices(self, shapes):
        """The matrix at the start of each buffer, for [cluster] wire = powersgd: shapes[i] is
        (rows, cols) of buffer i's first rows*cols floats, row-major (a weight's shape[0] and
        the rest), or (0, 0) for a buffer without one (hetring.h, hetring_matrices). Call it
        before the first step; with another wire it changes nothing."""
        self._own()
        if not self._L.has_matrices:
            raise Error(_lib.EINVAL, f"hetring: {self._L.path} has no hetring_matrices (a "
                                     f"libhetring older than this package's)")
        n = len(shapes)
        bad = [(i, s) for i, s in enumerate(shapes) if int(s[0]) < 0 or int(s[1]) < 0]
        if bad:  # a size_t: -1 would read as 2^64 - 1
            raise ValueError(f"hetring: matrices: shapes[{bad[0][0]}] = {tuple(bad[0][1])}: "
                             f"rows and cols must be 0 or more")
        rows = (ctypes.c_size_t * n)(*[int(r) for r, _ in shapes])
        cols = (ctypes.c_size_t * n)(*[int(c) for _, c in shapes])
        st = self._L.hetring_matrices(self._h, rows, cols, n)
        self._reraise()
        if st != _lib.OK:
            self._fail(st)

    def ready(self, buffers, i):
        """Buffer i of `buffers` (the list step() is then given) holds its final sums: hand it
        over now. With buckets on, the library all-reduces it on its own thread while you
        compute the rest (hetring.h, hetring_ready); call it from a backward hook."""
        self._own()
        if buffers is not self._given:
            self._set_buffers(buffers)
            self._given = buffers
        st = self._L.hetring_ready(self._h, ctypes.byref(self._grads), int(i))
        self._reraise()
        if st != _lib.OK:
            self._fail(st)

    def allreduce(self, address, count):
        """SUM all-reduce of `count` float32 at `address` over the current view, in place,
        between next() and step() and before any ready() of the iteration (hetring.h,
        hetring_allreduce): every member makes the same calls in the same order. Returns
        False when the view changed during the call: drop the iteration and fetch next()
        again, as when step() returns None; raises Left where this node left instead, as
        step() does."""
        self._own()
        if not self._L.has_allreduce:
            raise Error(_lib.EINVAL, f"hetring: {self._L.path} has no hetring_allreduce (a "
                                     f"libhetring older than this package's)")
        address, count = _check_memory("Node.allreduce", address, count, "count")
        st = self._L.hetring_allreduce(self._h, ctypes.c_void_p(address), count)
        self._reraise()
        if st == _lib.RETRY:
            return False
        if st != _lib.OK:
            self._fail(st)
        return True

    def step(self, buffers, compute_s, loss_sum=0.0, correct=0, param_hash=0):
        """All-reduce buffers (a list of (address, float32 count)) in place to the global mean.

        buffers hold this node's gradient SUMS over its batch's samples (not means), and come
        back as the sum over every node divided by B. compute_s: the seconds this node spent
        computing them (not waiting), above 0; loss_sum: the sum of the batch's per-sample
        losses; correct: its correct predictions (classification; else 0); param_hash: where
        the Batch's check_hash is set, hash_bytes over your parameters (else ignored).
        Returns a Result, or None when the view changed during the call: fetch next() again
        and compute the iteration again. Raises Left where a leave() was pending when a node
        failed during the call: this node left in the view change (nothing to apply).
        """
        self._own()
        if buffers is not self._given:
            self._set_buffers(buffers)
        self._given = None
        g = self._grads
        g.compute_s, g.loss_sum, g.correct = float(compute_s), float(loss_sum), int(correct)
        g.param_hash = int(param_hash)
        st = self._L.hetring_step(self._h, ctypes.byref(g), ctypes.byref(self._res))
        self._reraise()
        if st == _lib.RETRY:
            return None
        if st == _lib.ENONFINITE:
            raise NonFinite(st, f"hetring: {self.last_error()}", self._batch.iter,
                            self.nonfinite_nodes())
        if st not in (_lib.OK, _lib.SKIPPED):
            self._fail(st)
        r = Result()
        for f in Result.__slots__[:-2]:
            setattr(r, f, getattr(self._res, f))
        r.skipped = st == _lib.SKIPPED
        r.nonfinite_nodes = self.nonfinite_nodes() if r.skipped else []
        return r

    def nonfinite_nodes(self):
        """The ids of the nodes whose share (with the error-feedback residual of a lossy wire
        added) was not finite in the last step that was skipped or stopped as not finite ([]
        when every share was finite and their sum overflowed)."""
        if not self._L.has_nonfinite:
            return []
        n = self._L.hetring_nonfinite(self._h, None, 0)
        arr = (ctypes.c_long * max(n, 1))()
        n = min(n, self._L.hetring_nonfinite(self._h, arr, n))
        return list(arr[:n])

    @property
    def skipped(self):
        """Steps this node skipped as not finite ([train] nonfinite = skip)."""
        return self._L.hetring_skipped(self._h) if self._L.has_nonfinite else 0

    def members(self):
        """Every member's part in the last iteration completed, in ring order: a list of
        (node id, batch, compute seconds with any emulated stretch); [] before the first."""
        n = self._L.hetring_members(self._h, None, 0)
        arr = (_lib.Member * max(n, 1))()
        n = min(n, self._L.hetring_members(self._h, arr, n))
        return [(m.id, m.batch, m.compute_s) for m in arr[:n]]

    def leave(self):
        """Leave at the next boundary the members agree on (next() then raises Left)."""
        self._own()
        self._L.hetring_leave(self._h)

    # -------------------------------------------------------------- facts
    # each what the library says of the handle, read when asked
    node_id = _fact("hetring_node_id")
    rank = _fact("hetring_rank")
    size = _fact("hetring_size")
    global_batch = _fact("hetring_global_batch")
    iterations = _fact("hetring_iterations")
    samples = _fact("hetring_samples")

    def last_error(self):
        if not self._h:
            return ""
        return self._L.hetring_last_error(self._h).decode(errors="replace")

    def close(self):
        """Leave the ring now and release the node (idempotent). In a forked child it only lets
        go of the handle: freeing it there would end the parent's run on the parent's
        connections (the agreement on the run's end, the leave) and join threads that exist
        only in the parent."""
        if self._h:
            if os.getpid() == self._pid:
                self._L.hetring_free(self._h)
            self._h = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
