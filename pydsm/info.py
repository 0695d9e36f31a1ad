"""What this host offers: UCX version and transports (from ``ucx_info``),
RDMA devices (from /sys/class/infiniband or ``ibv_devinfo``), and which
pydsm fabrics that makes usable."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any, Dict, List, Optional, Tuple

SHM_TRANSPORTS = {"posix", "sysv", "cma", "xpmem", "knem"}
VERBS_TRANSPORTS = {"rc", "rc_verbs", "rc_mlx5", "ud", "ud_verbs", "ud_mlx5", "dc", "dc_mlx5"}


def _run(argv: List[str], timeout: float = 20.0) -> Optional[str]:
    if not shutil.which(argv[0]):
        return None
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.decode("utf-8", "replace")


def parse_ucx_devices(text: str) -> List[Tuple[str, str]]:
    """(transport, device) pairs from ``ucx_info -d`` output."""
    pairs = []
    transport = None
    for line in text.splitlines():
        m = re.match(r"#\s+Transport:\s*(\S+)", line)
        if m:
            transport = m.group(1)
            continue
        m = re.match(r"#\s+Device:\s*(\S+)", line)
        if m and transport:
            pairs.append((transport, m.group(1)))
    return pairs


def parse_ucx_version(text: str) -> Optional[str]:
    """Version from ``ucx_info -v`` output (e.g. ``1.13.1``)."""
    m = re.search(r"Version\s+(\S+)", text or "")
    return m.group(1) if m else None


def rdma_devices() -> List[Dict[str, Any]]:
    """RDMA devices with their ports' state and link layer."""
    devs = []
    base = "/sys/class/infiniband"
    if os.path.isdir(base):
        for name in sorted(os.listdir(base)):
            ports = []
            pdir = os.path.join(base, name, "ports")
            for port in sorted(os.listdir(pdir)) if os.path.isdir(pdir) else []:
                def rd(f: str) -> str:
                    try:
                        with open(os.path.join(pdir, port, f)) as fh:
                            return fh.read().strip()
                    except OSError:
                        return "?"
                ports.append({"port": port, "state": rd("state"), "link_layer": rd("link_layer")})
            devs.append({"device": name, "ports": ports})
        return devs
    text = _run(["ibv_devinfo", "-l"])
    if text:
        for line in text.splitlines()[1:]:
            if line.strip():
                devs.append({"device": line.strip(), "ports": []})
    return devs


def verbs_unavailable() -> Optional[str]:
    """Why the verbs fabric cannot run on this machine, or None when an RDMA
    device is present (the cheap part of what ``pydsm info`` checks)."""
    if rdma_devices():
        return None
    return ("the verbs fabric needs an RDMA device, and this machine has none "
            "(/sys/class/infiniband is empty and ibv_devinfo lists no device); "
            "shm and tcp work here, and `pydsm info` shows what UCX found")


def gather() -> Dict[str, Any]:
    """Everything ``pydsm info`` prints, as a dict."""
    from . import _lib

    info: Dict[str, Any] = {}
    info["ucx_version"] = parse_ucx_version(_run(["ucx_info", "-v"]) or "")
    devtext = _run(["ucx_info", "-d"])
    info["ucx_info_found"] = devtext is not None
    pairs = parse_ucx_devices(devtext or "")
    info["transports"] = pairs
    names = {t for t, _ in pairs}
    info["rdma_devices"] = rdma_devices()
    info["fabrics"] = {
        "shm": bool(names & SHM_TRANSPORTS),
        "tcp": "tcp" in names,
        "verbs": bool(names & VERBS_TRANSPORTS) or bool(info["rdma_devices"]),
    }
    try:
        info["libdsm"] = _lib.version()
    except Exception as exc:  # not built: still useful output
        info["libdsm"] = f"not available ({str(exc).splitlines()[0][:80]})"
    info["dsmd"] = _lib.find_binary("dsmd", "DSM_DSMD")
    info["benchmarks"] = _lib.bench_names()
    return info


def report(info: Optional[Dict[str, Any]] = None) -> str:
    """Human-readable text of :func:`gather`."""
    info = info or gather()
    lines = [f"libdsm:       {info['libdsm']}",
             f"dsmd:         {info['dsmd'] or 'not found'}",
             f"UCX:          {info['ucx_version'] or 'not found (install ucx-utils / libucx0)'}"]
    by_t: Dict[str, List[str]] = {}
    for t, d in info["transports"]:
        by_t.setdefault(t, []).append(d)
    if by_t:
        lines.append("transports:   " + ", ".join(f"{t} ({', '.join(ds)})" for t, ds in sorted(by_t.items())))
    else:
        lines.append("transports:   none found" + ("" if info["ucx_info_found"] else " (ucx_info missing)"))
    if info["rdma_devices"]:
        for d in info["rdma_devices"]:
            ports = ", ".join(f"port {p['port']} {p['state']} {p['link_layer']}" for p in d["ports"])
            lines.append(f"RDMA device:  {d['device']}" + (f" ({ports})" if ports else ""))
    else:
        lines.append("RDMA devices: none (verbs fabric unavailable; shm and tcp work)")
    lines.append("fabrics:      " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in info["fabrics"].items()))
    lines.append("benchmarks:   " + (", ".join(info["benchmarks"]) or "none built"))
    return "\n".join(lines)
