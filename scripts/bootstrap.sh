#!/usr/bin/env bash
# Setup step of `make demo` and `make test` (idempotent, non-interactive):
#  1. installs the Debian packages pydsm needs, when missing (apt-get update
#     only if something is missing; sudo only when not root);
#  2. creates the virtual environment .venv (python3 -m venv);
#  3. installs the Python dependencies and pydsm itself (which builds the C
#     core with CMake and ships libdsm.so, dsmd and the benchmarks inside it).
# Environment: PYTHON (default python3), VENV (default .venv), SKIP_APT=1.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
PACKAGES=(build-essential cmake ninja-build pkg-config libucx-dev ucx-utils rdma-core
          libibverbs-dev libssl-dev libcmocka-dev clang libclang-rt-14-dev memcached
          libmemcached-tools openmpi-bin libopenmpi-dev redis-server python3-venv python3-dev openssh-server iptables)
PY_DEPS=(setuptools wheel cffi numpy matplotlib pytest nbclient nbformat ipykernel build pandas tqdm ipywidgets
         mypy sphinx ansible-core ansible-lint)

say() { printf '[bootstrap] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

if [ "${SKIP_APT:-0}" != 1 ] && command -v dpkg >/dev/null 2>&1; then
    missing=()
    for p in "${PACKAGES[@]}"; do
        dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing Debian packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        as_root apt-get update -q
        as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
    else
        say "Debian packages: all present"
    fi
fi

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $($PYTHON --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
# pip's warnings about missing entries of local mirrors are noise here.
quiet_pip() { "${PIP[@]}" "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }

# Dependencies: only when one is missing (keeps a second run fast and offline).
if ! "$VENV/bin/python" -c "import setuptools, wheel, cffi, numpy, matplotlib, pytest, nbclient, nbformat, ipykernel, build, pandas, tqdm, ipywidgets, mypy, sphinx, ansible, ansiblelint" 2>/dev/null; then
    say "installing Python dependencies: ${PY_DEPS[*]}"
    quiet_pip install -q "${PY_DEPS[@]}"
fi

say "building and installing pydsm (C core through CMake in build-py/)"
# setuptools stages the package in build/lib.*/ and never removes a module
# that left the tree: a moved one would ship twice (the CMake build stays).
rm -rf build/lib.*/pydsm
quiet_pip install -q --no-build-isolation --no-deps .
# -I: do not put the checkout on sys.path (import the installed package)
"$VENV/bin/python" -I - <<'PYEOF'
import pydsm, pydsm._lib as l
print(f"[bootstrap] pydsm {pydsm.__version__} with libdsm {pydsm.lib_version()}, "
      f"dsmd at {l.dsmd_path()}, benchmarks: {', '.join(l.bench_names()) or 'none'}")
PYEOF
