"""Histories of concurrent operations and a linearizability checker.

A test records what each client did (when it invoked an operation, when the
operation returned, with what argument and result) and asks whether some
order of the operations, consistent with real time, explains every result
under a sequential model. That is linearizability (Herlihy and Wing); the
search is Wing and Gong's, with Lowe's memoisation of (linearized set,
model state), and a history is checked one key (``Op.key``, one object)
at a time (a history of independent objects is linearizable iff each
object's is).

Models: :class:`Register`, :class:`Counter`, :class:`KVMap` and
:class:`FifoQueue`. An operation that never returned (its client died or
the run was cut) may have taken effect or not; the checker tries both.

Example::

    h = History()
    with h.op(client=0, kind="write", arg=5) as op:
        store.write(5)
    with h.op(client=1, kind="read") as op:
        op.result = store.read()
    r = check(h, Register(initial=0))
    assert r.ok, r.explain()

Times come from ``time.monotonic_ns``: on one host every process and node
shares that clock. Histories from several hosts need clocks at least as
well synchronised as the operations are long; record them on one host or
merge them with :meth:`History.extend` after correcting the offsets.
"""
from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, Iterable, Iterator, List, Optional, Sequence, Tuple

__all__ = ["Op", "History", "Model", "Register", "Counter", "KVMap", "FifoQueue", "CheckResult", "check",
           "EMPTY"]


class _Empty:
    """The result of a pop or a read that found nothing."""

    _instance: Optional["_Empty"] = None

    def __new__(cls) -> "_Empty":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "EMPTY"


#: What a pop from an empty queue or a get of a missing key returns.
EMPTY: Any = _Empty()
_EMPTY_STATE: Hashable = EMPTY


@dataclass
class Op:
    """One operation of a history: who, what, when, with what outcome.

    ``ret`` is ``math.inf`` for an operation that never returned."""

    client: int
    kind: str
    arg: Any = None
    result: Any = None
    key: Hashable = None
    call: float = 0.0
    ret: float = math.inf
    index: int = -1

    @property
    def pending(self) -> bool:
        return self.ret == math.inf

    def __str__(self) -> str:
        key = "" if self.key is None else f"[{self.key!r}]"
        arg = "" if self.arg is None else repr(self.arg)
        end = "never returned" if self.pending else f"-> {self.result!r}"
        return f"client {self.client}: {self.kind}{key}({arg}) {end} [{self.call:.0f}, {self.ret:.0f}]"


class _Recording:
    """The context of :meth:`History.op`: set ``result`` inside the block."""

    def __init__(self, history: "History", op: Op) -> None:
        self._history = history
        self.op = op

    @property
    def result(self) -> Any:
        return self.op.result

    @result.setter
    def result(self, value: Any) -> None:
        self.op.result = value

    def __enter__(self) -> "_Recording":
        self.op.call = float(time.monotonic_ns())
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.op.ret = float(time.monotonic_ns())
        # an operation that raised may or may not have taken effect: pending
        self._history.add(self.op)


class History:
    """The operations of a run, from any number of threads (thread-safe)."""

    def __init__(self, ops: Iterable[Op] = ()) -> None:
        self._lock = threading.Lock()
        self._ops: List[Op] = []
        self.extend(ops)

    def op(self, client: int, kind: str, arg: Any = None, key: Hashable = None) -> _Recording:
        """Record one operation around a ``with`` block (times taken at the
        block's entry and exit; an exception leaves it pending)."""
        return _Recording(self, Op(client=client, kind=kind, arg=arg, key=key))

    def add(self, op: Op) -> None:
        if not op.pending and op.ret < op.call:
            raise ValueError(f"operation returns before it is called: {op}")
        with self._lock:
            op.index = len(self._ops)
            self._ops.append(op)

    def extend(self, ops: Iterable[Op]) -> None:
        for op in ops:
            self.add(Op(op.client, op.kind, op.arg, op.result, op.key, op.call, op.ret))

    @property
    def ops(self) -> List[Op]:
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)


class Model:
    """A sequential specification: ``step(state, op)`` gives whether op's
    result is possible in ``state`` and the state after it. States must be
    hashable (they are memoised)."""

    name = "model"

    def initial(self) -> Hashable:
        raise NotImplementedError

    def step(self, state: Any, op: Op) -> Tuple[bool, Any]:
        raise NotImplementedError

    def partition(self, ops: Sequence[Op]) -> List[List[Op]]:
        """Independent sub-histories, checked one by one: one per
        ``op.key``, each key naming its own object (a history with no keys
        is one)."""
        by_key: Dict[Hashable, List[Op]] = {}
        for op in ops:
            by_key.setdefault(op.key, []).append(op)
        return list(by_key.values())

    def _unknown(self, op: Op) -> ValueError:
        return ValueError(f"{self.name} has no operation {op.kind!r} (in {op})")


class Register(Model):
    """A read/write register: ``write(v)``, ``read() -> v``,
    ``cas((old, new)) -> bool``."""

    name = "register"

    def __init__(self, initial: Hashable = 0) -> None:
        self._initial = initial

    def initial(self) -> Hashable:
        return self._initial

    def step(self, state: Any, op: Op) -> Tuple[bool, Any]:
        if op.kind == "write":
            return True, op.arg
        if op.kind == "read":
            return op.result == state, state
        if op.kind == "cas":
            old, new = op.arg
            hit = state == old
            return bool(op.result) == hit, (new if hit else state)
        raise self._unknown(op)


class Counter(Model):
    """A counter: ``add(n)`` (result ignored), ``fetch_add(n) -> old``,
    ``read() -> value``."""

    name = "counter"

    def __init__(self, initial: int = 0) -> None:
        self._initial = initial

    def initial(self) -> Hashable:
        return self._initial

    def step(self, state: Any, op: Op) -> Tuple[bool, Any]:
        if op.kind == "add":
            return True, state + op.arg
        if op.kind == "fetch_add":
            return op.result == state, state + op.arg
        if op.kind == "read":
            return op.result == state, state
        raise self._unknown(op)


class KVMap(Model):
    """A map: ``put(v)``, ``get() -> v or EMPTY``, ``delete()`` on ``op.key``.
    Keys are independent: each key's sub-history is checked alone (as for
    every model)."""

    name = "key-value map"

    def initial(self) -> Hashable:
        return _EMPTY_STATE

    def step(self, state: Any, op: Op) -> Tuple[bool, Any]:
        if op.kind == "put":
            return True, op.arg
        if op.kind == "get":
            return op.result == state, state
        if op.kind == "delete":
            return True, EMPTY
        raise self._unknown(op)


class FifoQueue(Model):
    """A FIFO queue: ``push(v)``, ``pop() -> v or EMPTY``."""

    name = "FIFO queue"

    def initial(self) -> Hashable:
        return ()

    def step(self, state: Any, op: Op) -> Tuple[bool, Any]:
        if op.kind == "push":
            return True, state + (op.arg,)
        if op.kind == "pop":
            if op.result is EMPTY:
                return state == (), state
            return bool(state) and state[0] == op.result, state[1:]
        raise self._unknown(op)


@dataclass
class CheckResult:
    """The verdict. ``order``: a linearization when ok. When not ok,
    ``stuck``: an operation no order could place (in the longest partial
    order found, ``partial``), and the sub-history (``ops``) it belongs to."""

    ok: bool
    model: str
    order: List[Op] = field(default_factory=list)
    partial: List[Op] = field(default_factory=list)
    stuck: Optional[Op] = None
    ops: List[Op] = field(default_factory=list)
    states_explored: int = 0

    def explain(self) -> str:
        if self.ok:
            return f"linearizable as a {self.model} ({len(self.order)} operations)"
        lines = [f"not linearizable as a {self.model}: after the longest order found "
                 f"({len(self.partial)} operations), no operation can take effect before"]
        lines.append(f"  {self.stuck}")
        lines.append("that order:")
        lines += [f"  {op}" for op in self.partial[-20:]]
        if len(self.partial) > 20:
            lines.insert(3, f"  ... ({len(self.partial) - 20} earlier)")
        return "\n".join(lines)

    def __bool__(self) -> bool:
        return self.ok


class _Node:
    """An event of the doubly linked list the search walks: a call (with
    the matching return) or a return."""

    __slots__ = ("op", "bit", "is_call", "match", "prev", "next")

    def __init__(self, op: Optional[Op], bit: int, is_call: bool) -> None:
        self.op = op
        self.bit = bit
        self.is_call = is_call
        self.match: Optional[_Node] = None
        self.prev: Optional[_Node] = None
        self.next: Optional[_Node] = None


def _event_list(ops: Sequence[Op]) -> _Node:
    events: List[Tuple[float, int, _Node]] = []
    for i, op in enumerate(ops):
        call, ret = _Node(op, 1 << i, True), _Node(op, 1 << i, False)
        call.match = ret
        # at equal times a return goes first: the intervals do not overlap
        events.append((op.call, 1, call))
        events.append((op.ret, 0, ret))
    events.sort(key=lambda e: (e[0], e[1]))
    head = _Node(None, 0, False)
    prev = head
    for _, _, node in events:
        prev.next = node
        node.prev = prev
        prev = node
    return head


def _lift(call: _Node) -> None:
    """Take a call and its return out of the list."""
    for n in (call, call.match):
        assert n is not None and n.prev is not None
        n.prev.next = n.next
        if n.next is not None:
            n.next.prev = n.prev


def _unlift(call: _Node) -> None:
    for n in (call.match, call):
        assert n is not None and n.prev is not None
        n.prev.next = n
        if n.next is not None:
            n.next.prev = n


def _check_one(ops: Sequence[Op], model: Model) -> CheckResult:
    head = _event_list(ops)
    completed = sum(1 for op in ops if not op.pending)
    state: Any = model.initial()
    linearized = 0
    seen = {(0, state)}
    stack: List[Tuple[_Node, Any]] = []
    best: List[Op] = []
    stuck: Optional[Op] = None
    entry = head.next
    while completed > 0:
        assert entry is not None
        if entry.is_call:
            assert entry.op is not None
            ok, after = model.step(state, entry.op)
            key = (linearized | entry.bit, after)
            if ok and key not in seen:
                seen.add(key)
                stack.append((entry, state))
                state = after
                linearized |= entry.bit
                if not entry.op.pending:
                    completed -= 1
                _lift(entry)
                entry = head.next
            else:
                entry = entry.next
        else:
            # a return whose call is not linearized: the order so far fails
            if len(stack) >= len(best):
                best = [n.op for n, _ in stack if n.op is not None]
                stuck = entry.op
            if not stack:
                return CheckResult(False, model.name, partial=best, stuck=stuck, ops=list(ops),
                                   states_explored=len(seen))
            call, state = stack.pop()
            assert call.op is not None
            linearized &= ~call.bit
            if not call.op.pending:
                completed += 1
            _unlift(call)
            entry = call.next
    order = [n.op for n, _ in stack if n.op is not None]
    return CheckResult(True, model.name, order=order, ops=list(ops), states_explored=len(seen))


def check(history: History | Iterable[Op], model: Model) -> CheckResult:
    """Whether ``history`` is linearizable under ``model``; for a model with
    independent parts (:class:`KVMap`) every part must be."""
    ops = history.ops if isinstance(history, History) else list(history)
    for op in ops:
        if not op.pending and op.ret < op.call:
            raise ValueError(f"operation returns before it is called: {op}")
    order: List[Op] = []
    explored = 0
    for part in model.partition(ops):
        r = _check_one(part, model)
        explored += r.states_explored
        if not r.ok:
            r.states_explored = explored
            return r
        order += r.order
    return CheckResult(True, model.name, order=order, ops=list(ops), states_explored=explored)


def sequential_history(steps: Iterable[Tuple[int, str, Any, Any, Hashable]]) -> Iterator[Op]:
    """Ops of (client, kind, arg, result, key) run one after another (tests)."""
    for t, (client, kind, arg, result, key) in zip(itertools.count(0, 10), steps):
        yield Op(client, kind, arg, result, key, call=float(t), ret=float(t + 5))
