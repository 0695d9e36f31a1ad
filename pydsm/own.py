"""Ownership-guided coherence (DRust, ``csrc/own``) from Python: a
:class:`Box` is one object in global memory with a single owner (this
driver), read through shared borrows and written through a mutable one::

    with pydsm.Cluster.local(nodes=3) as c:
        box = c.box(np.arange(8.0), node=1)      # an object on node 1
        with box.borrow() as a:                   # read-only numpy view
            total = a.sum()
        with box.borrow_mut() as a:               # writable numpy view
            a[:] *= 2
        box.drop()

Coherence is DRust's (Algorithms 1-3): a shared borrow of a remote object
reads it once into this process's cache, keyed by the object's *coloured*
address, and later borrows hit the cache; the end of a mutable borrow gives
the object a new address (this driver holds no memory, so its write moves
the object to a new slot at its home), so every cached copy anywhere
becomes unreachable without an invalidation message.

Views are safe by construction: the array a borrow hands out is a copy
owned by Python (read once when the borrow starts; for ``borrow_mut`` written
back when the block ends), never a window onto memory the C core may free.
After the block the view is *released*: indexing it, assigning to it, numpy
functions and operators on it raise :class:`BorrowEnded` (a
:class:`pydsm.StateError`), so a stale read or a lost write is an error, not
silent. (A plain ``np.asarray(view)`` taken *inside* the block is an
ordinary array and stays usable as a snapshot.)
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _lib
from .errors import InvalidArgument, StateError
from .session import Session


#: The type id of every Python box's object (any size); shape and dtype
#: live with the :class:`Box`.
BOX_TYPE = 0x5059   # "PY"

#: The counters of :meth:`Own.stats` (dsm_own_stats_t).
STAT_FIELDS = ("messages", "bytes", "cache_hits", "cache_misses", "local_reads", "moves", "colour_bumps",
               "invalidations", "evictions", "cache_entries", "cache_bytes", "frees_served", "quarantined")


class BorrowEnded(StateError):
    """A borrow's view was used after its ``with`` block ended."""


class BorrowView(np.ndarray):
    """The numpy array a borrow hands out: a Python-owned copy of the
    object, read-only for :meth:`Box.borrow`. Once its block ends, any use
    raises :class:`BorrowEnded`."""

    def __array_finalize__(self, obj: Any) -> None:
        # Slices and other views of a view share its fate.
        self.__dict__["_parent"] = obj if isinstance(obj, BorrowView) else None
        self.__dict__["_what"] = getattr(obj, "_what", "borrow")

    @property
    def released(self) -> bool:
        """True once the borrow's block ended (every use then raises)."""
        p: Optional[BorrowView] = self
        while p is not None:
            if p.__dict__.get("_released_flag"):
                return True
            p = p.__dict__.get("_parent")
        return False

    def _check_chain(self) -> None:
        if self.released:
            raise BorrowEnded(f"this view of a box's {self.__dict__.get('_what', 'borrow')} is used after its "
                              "'with' block ended; borrow the box again")

    def __getitem__(self, key: Any) -> Any:
        self._check_chain()
        return super().__getitem__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._check_chain()
        super().__setitem__(key, value)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        for x in inputs + tuple(kwargs.get("out", ()) or ()):
            if isinstance(x, BorrowView):
                x._check_chain()
        args = [np.asarray(x) if isinstance(x, BorrowView) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(x) if isinstance(x, BorrowView) else x for x in kwargs["out"])
        return getattr(ufunc, method)(*args, **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        def plain(x: Any) -> Any:
            if isinstance(x, BorrowView):
                x._check_chain()
                return x.view(np.ndarray)
            if isinstance(x, (list, tuple)):
                return type(x)(plain(y) for y in x)
            return x
        return func(*plain(args), **{k: plain(v) for k, v in kwargs.items()})

    def __iter__(self) -> Iterator[Any]:
        self._check_chain()
        return super().__iter__()

    def __len__(self) -> int:
        self._check_chain()
        return super().__len__()

    def __repr__(self) -> str:
        if self.released:
            return f"<released {self.__dict__.get('_what', 'borrow')} view>"
        return super().__repr__()

    def tolist(self) -> Any:
        self._check_chain()
        return super().tolist()

    def tobytes(self, order: Any = "C") -> bytes:
        self._check_chain()
        return super().tobytes(order)

    def _release(self) -> None:
        self.__dict__["_released_flag"] = True


def _view(data: np.ndarray, what: str, writable: bool) -> BorrowView:
    v = data.view(BorrowView)
    v.__dict__["_parent"] = None
    v.__dict__["_what"] = what
    v.flags.writeable = writable
    return v


class Box:
    """One object in global memory owned by this driver (``c.own.box``).

    ``borrow()`` and ``borrow_mut()`` are context managers giving numpy
    views (see the module's notes on their safety); ``drop()`` frees the
    object (use the box as a context manager to drop it at the end).
    ``node`` is where the object was allocated; a write moves it to a new
    slot at its home, so :attr:`address` (the coloured address) changes.
    """

    def __init__(self, session: Session, handle: int, shape: Tuple[int, ...], dtype: np.dtype,
                 node: int) -> None:
        self.session = session
        self.handle = int(handle)
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.node = int(node)
        self._borrows = 0
        self._mut = False
        self._dropped = False

    @property
    def nbytes(self) -> int:
        """Bytes of the object's payload."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def __repr__(self) -> str:
        state = "dropped" if self._dropped else f"at {self.address:#x}"
        return f"<Box {self.shape} {self.dtype} node={self.node} {state}>"

    def __enter__(self) -> "Box":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self._dropped and not self.session.closed:
            self.drop()

    def _live(self, what: str) -> None:
        if self._dropped:
            raise StateError(f"{what} of a dropped box", op=what)
        if self._mut:
            raise StateError(f"{what} of a box that is mutably borrowed (the borrow rules: one writer "
                             "or any readers)", op=what)

    @property
    def address(self) -> int:
        """The object's coloured global address now (what a borrow looks up)."""
        if self._dropped:
            raise StateError("address of a dropped box", op="addr")
        e = _lib.ext()
        g = e.ffi.new("dsm_gaddr_t *")
        with self.session.in_use() as node:
            _lib.check(e.lib.dsm_own_box_addr(node, self.handle, g), "reading the box's owner record", op="box_addr")
        return int(g[0])

    @contextmanager
    def borrow(self) -> Iterator[BorrowView]:
        """A shared borrow: a read-only numpy view of the object (a copy of
        this process's cached copy). Others may borrow it too meanwhile."""
        self._live("borrow")
        e = _lib.ext()
        ref = e.ffi.new("dsm_own_ref_t *")
        with self.session.in_use() as node:
            _lib.check(e.lib.dsm_own_box_borrow(node, self.handle, ref), "borrowing the box", op="borrow")
            try:
                data = np.frombuffer(bytes(e.ffi.buffer(ref.data, ref.size)), dtype=self.dtype,
                                     count=int(np.prod(self.shape, dtype=np.int64))).reshape(self.shape)
            finally:
                _lib.check(e.lib.dsm_own_box_release(node, ref), "releasing the borrow", op="release")
        view = _view(data.copy(), "borrow", writable=False)
        self._borrows += 1
        try:
            yield view
        finally:
            self._borrows -= 1
            view._release()

    @contextmanager
    def borrow_mut(self) -> Iterator[BorrowView]:
        """A mutable borrow: a writable numpy view; what it holds when the
        block ends becomes the object (written back, even if the block
        raised). Refused (StateError) while this box is borrowed here."""
        self._live("borrow_mut")
        if self._borrows:
            raise StateError("borrow_mut of a box that is borrowed (the borrow rules: one writer or any "
                             "readers)", op="borrow_mut")
        e = _lib.ext()
        mut = e.ffi.new("dsm_own_mut_t *")
        with self.session.in_use() as node:
            _lib.check(e.lib.dsm_own_box_borrow_mut(node, self.handle, mut), "mutably borrowing the box",
                       op="borrow_mut")
            data = np.frombuffer(bytes(e.ffi.buffer(mut.data, mut.size)), dtype=self.dtype,
                                 count=int(np.prod(self.shape, dtype=np.int64))).reshape(self.shape).copy()
        view = _view(data, "borrow_mut", writable=True)
        self._mut = True
        try:
            yield view
        finally:
            self._mut = False
            view._release()
            with self.session.in_use() as node:
                e.ffi.memmove(mut.data, np.ascontiguousarray(data).tobytes(), mut.size)
                _lib.check(e.lib.dsm_own_box_release_mut(node, mut), "ending the mutable borrow", op="release_mut")

    def drop(self) -> None:
        """Free the object (at its home) and its owner record."""
        self._live("drop")
        if self._borrows:
            raise StateError("drop of a box that is borrowed", op="drop")
        e = _lib.ext()
        with self.session.in_use() as node:
            _lib.check(e.lib.dsm_own_box_drop(node, self.handle), "dropping the box", op="drop")
        self._dropped = True


class Own:
    """Ownership-guided coherence on a cluster (``c.own``): boxes and the
    driver's counters."""

    _type_registered = False   # the box type, registered once per process

    def __init__(self, session: Session) -> None:
        self.session = session

    def __repr__(self) -> str:
        return f"<pydsm.Own of the cluster at {self.session.coordinator or '?'}>"

    def box(self, data: Union[np.ndarray, Tuple[int, ...], int, List[Any]], dtype: Any = None,
            node: int = 0) -> Box:
        """A new :class:`Box` on daemon ``node``: ``box(array)`` holds a
        copy of the array; ``box(shape, dtype)`` a zero-filled one."""
        node = self.session.check_node(node)
        arr: Optional[np.ndarray] = None
        if isinstance(data, (np.ndarray, list)):
            arr = np.ascontiguousarray(np.asarray(data, dtype=dtype))
            if arr.dtype.hasobject:
                raise InvalidArgument("a box holds plain numbers: an object array cannot live in global memory")
            shape, dt = tuple(arr.shape), arr.dtype
        elif isinstance(data, (tuple, int, np.integer)):
            shape = (int(data),) if isinstance(data, (int, np.integer)) else tuple(int(x) for x in data)
            if any(s < 0 for s in shape):
                raise InvalidArgument(f"a box's shape must not be negative: {shape}")
            dt = np.dtype(dtype if dtype is not None else np.float64)
        else:
            raise InvalidArgument(f"box takes an array, a list or a shape, not {type(data).__name__}")
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        e = _lib.ext()
        if not Own._type_registered:
            _lib.check(e.lib.dsm_own_type_register(BOX_TYPE, b"pydsm.box", 0), "registering the box type")
            Own._type_registered = True
        out = e.ffi.new("dsm_own_box_t *")
        with self.session.in_use() as n:
            _lib.check(e.lib.dsm_own_box_alloc_on(n, node, BOX_TYPE, nbytes, out), f"allocating a box of {nbytes} B",
                       node=node, op="box")
        b = Box(self.session, int(out[0]), shape, dt, node)
        if arr is not None and nbytes:
            with b.borrow_mut() as a:
                a[...] = arr
        return b

    def stats(self) -> Dict[str, int]:
        """This driver's own counters (messages, bytes, cache hits and
        misses, moves, ...), cumulative: subtract two to count a span."""
        e = _lib.ext()
        s = e.ffi.new("dsm_own_stats_t *")
        with self.session.in_use() as n:
            e.lib.dsm_own_stats(n, s)
        return {f: int(getattr(s, f)) for f in STAT_FIELDS}
