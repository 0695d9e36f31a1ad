"""Results of a workload run: per-node figures and per-node stats counters as
numpy record arrays, a combined summary, a text table and a matplotlib plot."""
from __future__ import annotations

import json
import os
import sys
import types
import warnings
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from .units import format_value, render_table

FIGURE_DTYPE = np.dtype([("node", np.int32), ("name", "U64"), ("value", np.float64), ("unit", "U16")])
_ADDITIVE_UNITS = {"ops", "bytes", "B", "count", "msgs"}

#: What a figure is, as its workload declares it (``dsm_figure_kind_t`` in
#: ``dsm/plugin.h``), and so how the nodes' values combine into the run's.
#: A figure that declares none is combined by :func:`combine` from its unit.
KINDS = {
    "total": "the nodes' values add up (counts, bytes)",
    "rate": "work per second: the nodes' work over the slowest node's time",
    "mean": "the nodes' values are averaged (a latency)",
    "same": "every node reports the same value (nan when they disagree)",
    "first": "computed by the run's first node (rank_index 0) alone",
    "ratio": "a ratio of totals: the nodes' numerators over their denominators",
}

#: A figure as a workload reports it: (name, value, unit) or (name, value,
#: unit, kind), the kind as the result line's ``:kind`` word
#: (``ratio=num/den`` for a ratio).
FigureRow = Union[Tuple[str, Union[int, float], str], Tuple[str, Union[int, float], str, str]]


def combine(values: Sequence[float], unit: str) -> float:
    """How per-node figures of no declared kind combine into one: rates and
    counts add up (``ops/s``, ``B/s``, ``ops``), everything else (latencies)
    is averaged."""
    vals = [v for v in values if not np.isnan(v)]
    if not vals:
        return float("nan")
    if unit.endswith("/s") or unit in _ADDITIVE_UNITS:
        return float(sum(vals))
    return float(np.mean(vals))


def _split_kind(kind: str) -> Tuple[str, Optional[Tuple[float, float]]]:
    """A ``:kind`` word's kind and, for ``ratio=num/den``, its parts."""
    if kind.startswith("ratio="):
        num, _, den = kind[len("ratio="):].partition("/")
        try:
            return "ratio", (float(num), float(den))
        except ValueError:
            raise ValueError(f"a ratio figure's kind is ratio=NUM/DEN, not {kind!r}") from None
    if kind and kind not in KINDS:
        raise ValueError(f"unknown figure kind {kind!r} (kinds: {', '.join(KINDS)})")
    return kind, None


class OversubscribedWarning(RuntimeWarning):
    """A run had more busy threads on a host than it has cores: its latencies
    measure the scheduler as much as the system (see ``Result.oversubscribed``)."""


def busy_threads(placement: Any, nodes: int, progress: str = "blocking") -> int:
    """Threads of a run that keep a core busy on one host: each node's
    workload threads, plus its progress thread when that one polls."""
    threads = int(getattr(placement, "threads", 1) or 1)
    return nodes * (threads + (1 if progress == "busy" else 0))


def host_cores() -> int:
    """Cores this process may run on (its CPU affinity), the host's budget."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def better_label(unit: str) -> str:
    """Which way is better for a figure of ``unit``, as an axis-label suffix:
    rates and counts of work higher, times lower, anything else unsaid."""
    if unit.endswith("/s") or unit in ("ops",):
        return " (higher is better)"
    if unit in ("ns", "us", "ms", "s", "cycles"):
        return " (lower is better)"
    return ""


def _user_stacklevel() -> int:
    """The ``stacklevel`` that names the first caller outside pydsm, so a
    warning points at the user's line (and shows once per line)."""
    package = os.path.dirname(os.path.abspath(__file__))
    frame: Optional[types.FrameType] = sys._getframe(1)
    level = 1
    while frame is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


class Result:
    """What :meth:`pydsm.Cluster.run` returns.

    Attributes:
        workload: the workload's name.
        figures: record array (node, name, value, unit), one row per figure per node.
            ``value`` is a float64; an integer figure (a count or a 64-bit
            handle the workload wrote with ``dsm_result_add_u64``) is also
            kept exactly: :meth:`integer`.
        stats: record array with a ``node`` field and one field per counter
            (gets, puts, atomics, bytes_read, ...), the counts during the run.
        elapsed: wall-clock seconds of the run, seen by the driver.
        params, placement: what the run was asked to do.
        busy_threads, cores: threads of the run that kept a core busy on this
            host, and the cores it has (0, 0 when not known, e.g. the nodes
            run on other hosts).
        oversubscribed: True when busy_threads > cores: the nodes' threads
            fought for the cores, so latencies include waiting for a core
            (an OversubscribedWarning was issued).
    """

    def __init__(self, workload: str, figures: Mapping[int, Sequence[FigureRow]],
                 stats: Mapping[int, Mapping[str, int]], *, elapsed: float = 0.0,
                 params: Optional[Dict[str, Any]] = None, placement: Any = None,
                 busy_threads: int = 0, cores: int = 0) -> None:
        self.workload = workload
        self.elapsed = float(elapsed)
        self.params = dict(params or {})
        self.placement = placement
        self.busy_threads = int(busy_threads)
        self.cores = int(cores)
        self.oversubscribed = bool(cores) and self.busy_threads > self.cores
        if self.oversubscribed:
            warnings.warn(f"{workload}: {self.busy_threads} busy threads on {self.cores} cores: the nodes "
                          f"fought for the cores, so latencies include waiting for one (use fewer "
                          f"threads or nodes on this host)", OversubscribedWarning,
                          stacklevel=_user_stacklevel())
        #: the nodes in the run's order (rank_index 0 first): the order of ``figures``
        self._ranks = [int(n) for n in figures]
        rows = [(n, row[0], float(row[1]), row[2]) for n in sorted(figures) for row in figures[n]]
        #: the integer figures exactly, by (node, name)
        self._integers: Dict[Tuple[int, str], int] = {
            (int(n), row[0]): row[1] for n in figures for row in figures[n]
            if isinstance(row[1], int) and not isinstance(row[1], bool)}
        #: each figure's declared kind ("" when undeclared), and a ratio's parts by (node, name)
        self.kinds: Dict[str, str] = {}
        self._ratios: Dict[Tuple[int, str], Tuple[float, float]] = {}
        for n in figures:
            for row in figures[n]:
                kind, parts = _split_kind(row[3] if len(row) > 3 else "")
                if self.kinds.setdefault(row[0], kind) != kind:
                    raise ValueError(f"{workload}: figure {row[0]!r} is {self.kinds[row[0]] or 'undeclared'} "
                                     f"on one node and {kind or 'undeclared'} on node {n}")
                if parts is not None:
                    self._ratios[(int(n), row[0])] = parts
        self.figures = np.array(rows, dtype=FIGURE_DTYPE).view(np.recarray)
        fields = list(next(iter(stats.values())).keys()) if stats else []
        sdtype = np.dtype([("node", np.int32)] + [(f, np.uint64) for f in fields])
        srows = [tuple([n] + [stats[n][f] for f in fields]) for n in sorted(stats)]
        self.stats = np.array(srows, dtype=sdtype).view(np.recarray)

    @property
    def nodes(self) -> List[int]:
        """Nodes that ran the workload."""
        return sorted(set(int(n) for n in self.figures.node)) or [int(n) for n in self.stats.node]

    @property
    def names(self) -> List[str]:
        """Figure names, in the order the workload reported them."""
        seen: Dict[str, None] = {}
        for n in self.figures.name:
            seen.setdefault(str(n), None)
        return list(seen)

    def unit(self, name: str) -> str:
        """Unit of figure ``name``."""
        rows = self.figures[self.figures.name == name]
        if not len(rows):
            raise KeyError(f"no figure {name!r} in this result (figures: {self.names})")
        return str(rows.unit[0])

    def per_node(self, name: str) -> np.recarray:
        """Figure ``name`` of every node, as a record array (node, value)."""
        rows = self.figures[self.figures.name == name]
        if not len(rows):
            raise KeyError(f"no figure {name!r} in this result (figures: {self.names})")
        out = np.zeros(len(rows), dtype=[("node", np.int32), ("value", np.float64)]).view(np.recarray)
        out.node, out.value = rows.node, rows.value
        return out

    def integer(self, name: str, node: Optional[int] = None) -> int:
        """Integer figure ``name`` exactly (all 64 bits, which the float64
        ``value`` cannot hold): of ``node``, or of the one node that
        reported it. ValueError when it is not an integer figure, or when
        several nodes reported it and no node is given."""
        nodes = [int(n) for n in self.per_node(name).node] if node is None else [int(node)]
        if len(nodes) != 1:
            raise ValueError(f"figure {name!r} comes from nodes {nodes}: say which (node=...)")
        if (nodes[0], name) not in self._integers:
            raise ValueError(f"figure {name!r} of node {nodes[0]} is not an integer figure "
                             f"(the workload wrote it with dsm_result_add, not dsm_result_add_u64)")
        return self._integers[(nodes[0], name)]

    def kind(self, name: str) -> str:
        """What figure ``name`` is, as its workload declared it (a key of
        :data:`KINDS`), or ``""`` when it declared nothing (then its unit
        decides: a rate, a count that adds up, or a mean)."""
        self.unit(name)  # KeyError naming the figures
        return self.kinds.get(name, "")

    def __getitem__(self, name: str) -> float:
        """The run's value of figure ``name``, combined by what the figure is
        (:meth:`kind`): a total adds up, a rate is the nodes' work over the
        slowest node's time (see :meth:`rate`), a ratio is the sum of its
        numerators over the sum of its denominators, a mean is averaged, a
        value that must agree is that value, and a figure of the first node
        is that node's. A figure of no declared kind: a rate if its unit is
        ``X/s``, else a sum of counts or a mean of anything else."""
        unit, kind = self.unit(name), self.kind(name)
        values = self.per_node(name)
        if kind == "rate" or (not kind and unit.endswith("/s")):
            return self.rate(name)
        if kind == "total":
            return float(np.nansum(values.value)) if len(values) else float("nan")
        if kind == "mean":
            return combine(list(values.value), "")
        if kind == "ratio":
            num = sum(self._ratios[(int(n), name)][0] for n in values.node)
            den = sum(self._ratios[(int(n), name)][1] for n in values.node)
            return float(num / den) if den else 0.0
        if kind == "same":
            distinct = set(float(v) for v in values.value)
            return distinct.pop() if len(distinct) == 1 else float("nan")
        if kind == "first":
            by_node = {int(n): float(v) for n, v in zip(values.node, values.value)}
            first = next((n for n in self._ranks if n in by_node), None)
            return by_node[first] if first is not None else float("nan")
        return combine(list(values.value), unit)

    def _seconds(self, name: str) -> Optional[npt.NDArray[np.float64]]:
        """Each node's running time behind rate ``name`` (unit ``X/s``): from a
        per-node ``seconds`` figure, else from the count of ``X`` (the figure
        of unit ``X``) over the rate. None when neither is reported."""
        rate = self.per_node(name)
        nodes = list(rate.node)
        if "seconds" in self and self.unit("seconds") == "s":
            secs = {int(r.node): float(r.value) for r in self.per_node("seconds")}
            if all(n in secs for n in nodes):
                return np.array([secs[n] for n in nodes])
        work_unit = self.unit(name)[:-2]
        counts = [n for n in self.names if self.unit(n) == work_unit]
        if len(counts) == 1:
            c = {int(r.node): float(r.value) for r in self.per_node(counts[0])}
            if all(n in c for n in nodes) and np.all(rate.value > 0):
                secs_of: npt.NDArray[np.float64] = np.array([c[n] for n in nodes]) / rate.value
                return secs_of
        return None

    def rate(self, name: str) -> float:
        """Rate figure ``name`` of the whole run: the work of every node over
        the slowest node's time (nodes run for different spans, so per-node
        rates must not be summed). Summed only when the workload reports
        neither each node's seconds nor its count of work."""
        per = self.per_node(name).value
        secs = self._seconds(name)
        if secs is None or not len(per) or np.any(np.isnan(per)) or secs.max() <= 0:
            return combine(list(per), self.unit(name))
        return float((per * secs).sum() / secs.max())

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def summary(self) -> Dict[str, Tuple[float, str]]:
        """``{name: (combined value, unit)}`` for every figure."""
        return {n: (self[n], self.unit(n)) for n in self.names}

    def totals(self) -> Dict[str, int]:
        """Stats counters summed over the nodes."""
        return {f: int(self.stats[f].sum()) for f in self.stats.dtype.names if f != "node"}

    def _kind_word(self, node: int, name: str) -> str:
        """Figure ``name``'s kind of ``node`` as its result line wrote it."""
        parts = self._ratios.get((node, name))
        return f"ratio={parts[0]!r}/{parts[1]!r}" if parts else self.kinds.get(name, "")

    def to_dict(self) -> Dict[str, Any]:
        """Everything as plain Python values (JSON-ready)."""
        return {
            "workload": self.workload, "elapsed_s": self.elapsed, "params": self.params,
            "placement": repr(self.placement) if self.placement is not None else None,
            "busy_threads": self.busy_threads, "cores": self.cores, "oversubscribed": self.oversubscribed,
            "summary": {n: {"value": v, "unit": u, "kind": self.kinds.get(n, "")}
                        for n, (v, u) in self.summary().items()},
            "figures": [{"node": int(r.node), "name": str(r.name),
                         "value": self._integers.get((int(r.node), str(r.name)), float(r.value)),
                         "unit": str(r.unit), "kind": self._kind_word(int(r.node), str(r.name))}
                        for r in self.figures],
            "stats": [{f: int(r[f]) for f in self.stats.dtype.names} for r in self.stats],
        }

    def to_pandas(self, what: str = "figures") -> Any:
        """A pandas DataFrame of the ``figures`` (node, name, value, unit; one
        row per figure per node) or of the ``stats`` (one row per node).
        pandas is optional: ImportError says how to get it."""
        if what not in ("figures", "stats"):
            raise ValueError(f"to_pandas takes 'figures' or 'stats', not {what!r}")
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Result.to_pandas needs pandas: pip install pandas") from None
        return pd.DataFrame.from_records(np.asarray(getattr(self, what)))

    def to_json(self, path: Optional[str] = None) -> str:
        """JSON text of :meth:`to_dict`; also written to ``path`` if given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path:
            with open(path, "w") as f:
                f.write(text + "\n")
        return text

    def table(self) -> str:
        """A text table: one column per node plus the combined value, one
        row per figure, then the main stats counters."""
        nodes = self.nodes
        headers = ["figure", "unit"] + [f"node {n}" for n in nodes] + ["all"]
        rows = []
        for name in self.names:
            per = {int(r.node): float(r.value) for r in self.figures[self.figures.name == name]}
            rows.append([name, self.unit(name)] + [format_value(per.get(n, float("nan"))) for n in nodes]
                        + [format_value(self[name])])
        srows = {int(r.node): r for r in self.stats}
        for field in ("gets", "puts", "atomics", "am_sent", "am_recv", "spawns_run", "errors"):
            if field not in (self.stats.dtype.names or ()):
                continue
            vals = [int(srows[n][field]) if n in srows else 0 for n in nodes]
            if not any(vals) and field != "atomics":
                continue
            rows.append([f"stats.{field}", "count"] + [format_value(v) for v in vals]
                        + [format_value(sum(vals))])
        title = f"{self.workload}: {len(nodes)} node(s), {self.elapsed:.2f} s"
        if self.oversubscribed:
            title += f" (oversubscribed: {self.busy_threads} busy threads on {self.cores} cores)"
        return title + "\n" + render_table(headers, rows, "ll" + "r" * (len(nodes) + 1))

    def __str__(self) -> str:
        return self.table()

    def __repr__(self) -> str:
        summ = ", ".join(f"{n}={format_value(v)} {u}" for n, (v, u) in self.summary().items())
        return f"<Result {self.workload} nodes={self.nodes} {summ}>"

    #: Figures :meth:`plot` shows by default, at most.
    PLOT_DEFAULT_MAX = 6

    def default_figures(self) -> List[str]:
        """The figures :meth:`plot` shows when not told: the rates first,
        then times, then ratios, at most :attr:`PLOT_DEFAULT_MAX`; never a
        value one node computes or all must agree on (a checksum, a
        parameter), which is no measurement to compare across nodes. Only
        when that leaves nothing, the first other figures."""
        measured = [n for n in self.names if self.kind(n) not in ("first", "same")]

        def rank(name: str) -> int:
            unit, kind = self.unit(name), self.kind(name)
            if kind == "rate" or unit.endswith("/s"):
                return 0
            if kind == "mean" or unit in ("ns", "us", "ms", "s", "cycles"):
                return 1
            return 2 if kind == "ratio" else 3

        chosen = sorted((n for n in measured if rank(n) < 3), key=rank)
        return (chosen or measured)[:self.PLOT_DEFAULT_MAX]

    def plot(self, figures: Optional[Sequence[str]] = None, path: Optional[str] = None,
             title: Optional[str] = None, *, columns: int = 3) -> Any:
        """Bar charts of ``figures`` per node (default: :meth:`default_figures`),
        in a grid of ``columns`` panels a row, each panel's title giving the
        run's value (matplotlib). Returns the Figure; saves it to ``path``
        (PNG, SVG, PDF by extension) when given."""
        # A Figure of its own, outside pyplot: nothing global stays open, and a
        # notebook shows it once, when it is the cell's value.
        from matplotlib.figure import Figure

        if isinstance(figures, str):
            # plot(path) was the signature before figures came first: still a
            # path, with a nudge, so that code written for it keeps working
            if path is not None or figures in self:
                raise TypeError(f"plot(figures) takes a list of figure names, not the string {figures!r}")
            warnings.warn(f"plot({figures!r}): the first argument is the figures now; "
                          f"save with plot(path={figures!r})", DeprecationWarning, stacklevel=2)
            figures, path = None, figures
        names = list(self.default_figures() if figures is None else figures)
        unknown = [n for n in names if n not in self]
        if unknown:
            raise KeyError(f"no figure {unknown[0]!r} in this result (figures: {self.names})")
        if columns < 1:
            raise ValueError(f"columns must be at least 1, not {columns}")
        names = names or ["(no figures)"]
        ncols = min(columns, len(names))
        nrows = -(-len(names) // ncols)
        fig = Figure(figsize=(3.6 * ncols + 0.8, 3.0 * nrows + 0.6))
        axes = fig.subplots(nrows, ncols, squeeze=False)
        for i, ax in enumerate(axes.flat):
            name = names[i] if i < len(names) else ""
            if name not in self:
                ax.set_axis_off()
                continue
            per = self.per_node(name)
            ax.bar([str(n) for n in per.node], per.value, color="#4C72B0")
            ax.set_title(f"{name}\nall: {format_value(self[name])} {self.unit(name)}", fontsize=9)
            ax.set_xlabel("node")
            ax.set_ylabel(f"{self.unit(name)}{better_label(self.unit(name))}")
            ax.grid(axis="y", alpha=0.3)
        fig.suptitle(title or f"{self.workload} ({self.elapsed:.2f} s)", fontsize=10)
        fig.tight_layout()
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            fig.savefig(path, dpi=110)
        return fig
