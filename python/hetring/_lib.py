"""_lib.py: the ctypes declarations of hetring.h and where libhetring is found.

Search order: the HETRING_LIB environment variable (a file), a libhetring.so* next to this
package, then the system's library path (libhetring.so.0, the SOVERSION this binding speaks).
"""
import ctypes
import ctypes.util
import glob
import os

OK = 0
EINVAL = 1
EMISMATCH = 10
ENONFINITE = 13
RETRY = 100
DONE = 101
LEFT = 102
ECLOSED = 103
SKIPPED = 104

_SONAME = "libhetring.so.0"


class View(ctypes.Structure):
    _fields_ = [
        ("epoch", ctypes.c_uint64),
        ("n", ctypes.c_int),
        ("ids", ctypes.POINTER(ctypes.c_long)),
        ("rank", ctypes.c_int),
        ("iter", ctypes.c_long),
        ("state_bytes", ctypes.c_size_t),
        ("left", ctypes.POINTER(ctypes.c_long)),
        ("n_left", ctypes.c_int),
        ("joined", ctypes.POINTER(ctypes.c_long)),
        ("n_joined", ctypes.c_int),
        ("change_s", ctypes.c_double),
    ]


GET_STATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p,
                             ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t))
PUT_STATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
ON_VIEW = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.POINTER(View))


class Callbacks(ctypes.Structure):
    _fields_ = [
        ("user", ctypes.c_void_p),
        ("get_state", GET_STATE),
        ("put_state", PUT_STATE),
        ("on_view", ON_VIEW),
    ]


class Options(ctypes.Structure):
    _fields_ = [
        ("conf", ctypes.c_char_p),
        ("node_id", ctypes.c_long),
        ("n_samples", ctypes.c_long),
        ("set", ctypes.POINTER(ctypes.c_char_p)),
        ("sync_first", ctypes.c_int),
        ("cb", Callbacks),
        ("conf_text", ctypes.c_char_p),
        ("start_iter", ctypes.c_long),
        ("leave_flag", ctypes.c_void_p),
    ]


class Member(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_long),
        ("batch", ctypes.c_long),
        ("compute_s", ctypes.c_double),
    ]


class Batch(ctypes.Structure):
    _fields_ = [
        ("iter", ctypes.c_long),
        ("epoch", ctypes.c_long),
        ("global_batch", ctypes.c_long),
        ("batch", ctypes.c_long),
        ("start", ctypes.c_long),
        ("indices", ctypes.POINTER(ctypes.c_int64)),
        ("rank", ctypes.c_int),
        ("size", ctypes.c_int),
        ("check_hash", ctypes.c_int),
        ("view_changed", ctypes.c_int),
        ("slowdown", ctypes.c_double),
    ]


class Grads(ctypes.Structure):
    _fields_ = [
        ("bufs", ctypes.POINTER(ctypes.c_void_p)),
        ("counts", ctypes.POINTER(ctypes.c_size_t)),
        ("n_bufs", ctypes.c_int),
        ("compute_s", ctypes.c_double),
        ("loss_sum", ctypes.c_double),
        ("correct", ctypes.c_long),
        ("param_hash", ctypes.c_uint64),
    ]


class Result(ctypes.Structure):
    _fields_ = [
        ("iter", ctypes.c_long),
        ("loss", ctypes.c_double),
        ("accuracy", ctypes.c_double),
        ("next_batch", ctypes.c_long),
        ("changed", ctypes.c_int),
        ("t_compute", ctypes.c_double),
        ("t_node", ctypes.c_double),
        ("t_comm", ctypes.c_double),
        ("buckets", ctypes.c_int),
        ("early", ctypes.c_int),
    ]


def _candidates():
    env = os.environ.get("HETRING_LIB")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for p in sorted(glob.glob(os.path.join(here, "libhetring.so*"))):
        yield p
    yield _SONAME
    found = ctypes.util.find_library("hetring")
    if found:
        yield found


def load():
    """The loaded libhetring, with the argument types of hetring.h declared."""
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise OSError("libhetring not found (set HETRING_LIB to the file, install it, or put "
                      "it next to the hetring package): " + "; ".join(errors))
    h = ctypes.c_void_p
    sig = {
        "hetring_version": (ctypes.c_char_p, []),
        "hetring_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "hetring_options_init": (None, [ctypes.POINTER(Options)]),
        "hetring_open": (ctypes.c_int, [ctypes.POINTER(h), ctypes.POINTER(Options),
                                        ctypes.c_char_p, ctypes.c_size_t]),
        "hetring_next": (ctypes.c_int, [h, ctypes.POINTER(Batch)]),
        "hetring_ready": (ctypes.c_int, [h, ctypes.POINTER(Grads), ctypes.c_int]),
        "hetring_step": (ctypes.c_int, [h, ctypes.POINTER(Grads), ctypes.POINTER(Result)]),
        "hetring_leave": (None, [h]),
        "hetring_node_id": (ctypes.c_long, [h]),
        "hetring_rank": (ctypes.c_int, [h]),
        "hetring_size": (ctypes.c_int, [h]),
        "hetring_global_batch": (ctypes.c_long, [h]),
        "hetring_samples": (ctypes.c_long, [h]),
        "hetring_iterations": (ctypes.c_long, [h]),
        "hetring_members": (ctypes.c_int, [h, ctypes.POINTER(Member), ctypes.c_int]),
        "hetring_last_error": (ctypes.c_char_p, [h]),
        "hetring_hash": (ctypes.c_uint64, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint64]),
        "hetring_close": (ctypes.c_int, [h]),
        "hetring_free": (None, [h]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    # newer than the rest of 0.3 (Node.allreduce says so where the library lacks it)
    lib.has_allreduce = hasattr(lib, "hetring_allreduce")
    if lib.has_allreduce:
        lib.hetring_allreduce.restype = ctypes.c_int
        lib.hetring_allreduce.argtypes = [h, ctypes.c_void_p, ctypes.c_size_t]
    # newer still: steps that are not finite ([train] nonfinite)
    lib.has_nonfinite = hasattr(lib, "hetring_nonfinite")
    if lib.has_nonfinite:
        lib.hetring_nonfinite.restype = ctypes.c_int
        lib.hetring_nonfinite.argtypes = [h, ctypes.POINTER(ctypes.c_long), ctypes.c_int]
        lib.hetring_skipped.restype = ctypes.c_long
        lib.hetring_skipped.argtypes = [h]
    # newer still: the matrices of the buffers ([cluster] wire = powersgd)
    lib.has_matrices = hasattr(lib, "hetring_matrices")
    if lib.has_matrices:
        lib.hetring_matrices.restype = ctypes.c_int
        lib.hetring_matrices.argtypes = [h, ctypes.POINTER(ctypes.c_size_t),
                                         ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    # and the error-feedback residual, for checkpoints (wire = bf16 or powersgd)
    lib.has_residual = hasattr(lib, "hetring_residual")
    if lib.has_residual:
        lib.hetring_residual.restype = ctypes.c_long
        lib.hetring_residual.argtypes = [h, ctypes.c_void_p, ctypes.c_size_t]
        lib.hetring_resume_residual.restype = ctypes.c_int
        lib.hetring_resume_residual.argtypes = [h, ctypes.c_void_p, ctypes.c_size_t]
    # and the powersgd wire's Q, replicated state for checkpoints beside it
    lib.has_powersgd_q = hasattr(lib, "hetring_powersgd_q")
    if lib.has_powersgd_q:
        lib.hetring_powersgd_q.restype = ctypes.c_long
        lib.hetring_powersgd_q.argtypes = [h, ctypes.c_void_p, ctypes.c_size_t]
        lib.hetring_resume_powersgd_q.restype = ctypes.c_int
        lib.hetring_resume_powersgd_q.argtypes = [h, ctypes.c_void_p, ctypes.c_size_t]
    lib.path = path
    return lib
