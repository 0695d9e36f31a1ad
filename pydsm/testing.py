"""pytest plugin (entry point ``pytest11: dsm``): cluster fixtures.

Fixtures::

    dsm_cluster      a cluster for the test: local (3 nodes over shm by
                     default; a test marked ``tcp`` gets one over tcp), or the
                     deployed cluster given by ``--dsm-connect``/``--dsm-secret``.
    dsm_cluster_shm  a local cluster over shm (skipped when connected).
    dsm_cluster_tcp  a local cluster over tcp (skipped when connected).
    dsm_cluster_factory  ``factory(nodes=..., fabric=...)`` -> a fresh local
                     cluster, closed after the test (for tests that break one).

Local clusters are shared by the tests of a session (one per fabric and
size) and restarted when a test left one broken (a node dead or closed).

Histories and their linearizability checker (:mod:`pydsm.linearizability`)
are re-exported here: ``History``, ``check`` and the models ``Register``,
``Counter``, ``KVMap``, ``FifoQueue``.

Options::

    --dsm-connect HOST:PORT  run against a deployed cluster
    --dsm-secret S           its secret (or $DSM_SECRET)
    --dsm-connect-fabric F   fabric to join it with (shm, tcp, verbs, auto)
    --dsm-net-device DEV     this host's device for that fabric (e.g. eth1, mlx5_0:1)
    --dsm-nodes N            size of the local clusters (default 3)
    --dsm-fabric NAME        fabric of dsm_cluster when unmarked (default shm)
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import pytest

from .linearizability import EMPTY, Counter, FifoQueue, History, KVMap, Op, Register, check  # noqa: F401


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("pydsm", "pydsm clusters")
    group.addoption("--dsm-connect", metavar="HOST:PORT", default=None,
                    help="run the dsm_cluster tests against this deployed coordinator")
    group.addoption("--dsm-secret", metavar="SECRET", default=None,
                    help="secret of the deployed cluster (default: $DSM_SECRET)")
    group.addoption("--dsm-connect-fabric", default="auto", choices=["shm", "tcp", "verbs", "auto"],
                    help="fabric this process uses to join the deployed cluster (default auto)")
    group.addoption("--dsm-net-device", metavar="DEV", default=None,
                    help="network device this process joins the deployed cluster through (default: UCX picks)")
    group.addoption("--dsm-nodes", type=int, default=3, help="nodes of local test clusters (default 3)")
    group.addoption("--dsm-fabric", default="shm", choices=["shm", "tcp"],
                    help="fabric of dsm_cluster for tests without a transport marker")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "shm: run on a local cluster over the shm fabric")
    config.addinivalue_line("markers", "tcp: run on a local cluster over the tcp fabric")
    config.addinivalue_line("markers", "dsm_nodes(n): size of the local cluster for this test")


class ClusterPool:
    """Local clusters shared by a test session, keyed by (fabric, nodes)."""

    def __init__(self) -> None:
        self._clusters: Dict[Tuple[str, int], Any] = {}

    def get(self, fabric: str, nodes: int) -> Any:
        from .cluster import Cluster

        key = (fabric, nodes)
        c = self._clusters.get(key)
        if c is not None and not self.healthy(c, nodes):
            c.close()
            c = None
        if c is None:
            c = Cluster.local(nodes=nodes, fabric=fabric, partition="64MiB")
            self._clusters[key] = c
        return c

    @staticmethod
    def healthy(c: Any, nodes: int) -> bool:
        if c.closed or any(p.poll() is not None for p in c.processes):
            return False
        try:
            return len(c.live_nodes()) >= nodes
        except Exception:
            return False

    def close(self) -> None:
        for c in self._clusters.values():
            c.close()
        self._clusters.clear()


@pytest.fixture(scope="session")
def dsm_cluster_pool() -> Iterator[ClusterPool]:
    """The session's shared local clusters."""
    pool = ClusterPool()
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def dsm_connected(request: Any) -> Iterator[Any]:
    """The deployed cluster of --dsm-connect (None when not given)."""
    addr = request.config.getoption("--dsm-connect")
    if not addr:
        yield None
        return
    from .cluster import Cluster

    secret = request.config.getoption("--dsm-secret") or os.environ.get("DSM_SECRET", "")
    if not secret:
        raise pytest.UsageError("--dsm-connect needs --dsm-secret (or $DSM_SECRET)")
    c = Cluster.connect(addr, secret, fabric=request.config.getoption("--dsm-connect-fabric"),
                        net_device=request.config.getoption("--dsm-net-device"))
    yield c
    c.close()


def _marked_fabric(request: Any) -> Optional[str]:
    """The fabric a test's ``shm``/``tcp`` marker asks for, or None."""
    marks = {m.name for m in request.node.iter_markers()}
    if "tcp" in marks and "shm" in marks:
        raise pytest.UsageError(f"{request.node.nodeid}: marked both shm and tcp")
    if "tcp" in marks:
        return "tcp"
    if "shm" in marks:
        return "shm"
    return None


def _fabric_of(request: Any) -> str:
    return _marked_fabric(request) or request.config.getoption("--dsm-fabric")


def _nodes_of(request: Any) -> int:
    m = request.node.get_closest_marker("dsm_nodes")
    return int(m.args[0]) if m and m.args else int(request.config.getoption("--dsm-nodes"))


@pytest.fixture
def dsm_cluster(request: Any, dsm_cluster_pool: ClusterPool, dsm_connected: Any) -> Any:
    """A running cluster: the deployed one, or a shared local one whose fabric
    follows the test's ``shm``/``tcp`` marker."""
    if dsm_connected is not None:
        wanted = _marked_fabric(request)
        if wanted and wanted != dsm_connected.fabric:
            pytest.skip(f"marked {wanted}, but the cluster of --dsm-connect runs over {dsm_connected.fabric}")
        return dsm_connected
    return dsm_cluster_pool.get(_fabric_of(request), _nodes_of(request))


@pytest.fixture
def dsm_cluster_shm(request: Any, dsm_cluster_pool: ClusterPool, dsm_connected: Any) -> Any:
    """A shared local cluster over shm."""
    if dsm_connected is not None:
        pytest.skip("local shm cluster not used with --dsm-connect")
    return dsm_cluster_pool.get("shm", _nodes_of(request))


@pytest.fixture
def dsm_cluster_tcp(request: Any, dsm_cluster_pool: ClusterPool, dsm_connected: Any) -> Any:
    """A shared local cluster over tcp (loopback)."""
    if dsm_connected is not None:
        pytest.skip("local tcp cluster not used with --dsm-connect")
    return dsm_cluster_pool.get("tcp", _nodes_of(request))


@pytest.fixture
def dsm_cluster_factory() -> Iterator[Callable[..., Any]]:
    """Make fresh local clusters (closed after the test): ``factory(nodes=3, fabric="shm", **kw)``."""
    from .cluster import Cluster

    made: List[Any] = []

    def make(nodes: int = 3, fabric: str = "shm", **kw: Any) -> Any:
        kw.setdefault("partition", "64MiB")
        c = Cluster.local(nodes=nodes, fabric=fabric, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
