"""Builds pydsm: the C core through CMake, then the CFFI extension (API mode)
linked against it, and puts libdsm.so, dsmd and the benchmark programs inside
the package so that ``pip install .`` gives a working toolkit.

Environment:
    PYDSM_CMAKE_BUILD_DIR  where CMake builds (default: <checkout>/build-py)
    PYDSM_CMAKE_ARGS       extra arguments for the CMake configure step
    PYDSM_JOBS             parallel build jobs (default: number of CPUs)
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
INCLUDE = os.path.join(ROOT, "csrc", "include")


def _log(msg: str) -> None:
    print(f"[pydsm build] {msg}", file=sys.stderr, flush=True)


def cmake_build() -> str:
    """Configure and build libdsm, dsmd and the benchmarks; returns the build dir."""
    build = os.environ.get("PYDSM_CMAKE_BUILD_DIR") or os.path.join(ROOT, "build-py")
    cmake = shutil.which("cmake")
    if not cmake:
        raise RuntimeError("cmake is required to build pydsm's C core (apt-get install cmake)")
    configure = [cmake, "-S", ROOT, "-B", build, "-DDSM_TESTS=OFF", "-DDSM_BENCH=ON",
                 "-DDSM_FUZZ=OFF", "-DCMAKE_BUILD_TYPE=RelWithDebInfo"]
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")) and shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += shlex.split(os.environ.get("PYDSM_CMAKE_ARGS", ""))
    _log(" ".join(configure))
    subprocess.check_call(configure)
    jobs = os.environ.get("PYDSM_JOBS") or str(os.cpu_count() or 2)
    try:
        subprocess.check_call([cmake, "--build", build, "-j", jobs])
    except subprocess.CalledProcessError:
        # A benchmark that does not build yet must not stop the toolkit:
        # build the library and the daemon alone, and ship what exists.
        _log("full build failed; building only the library and dsmd (some benchmarks will be missing)")
        subprocess.check_call([cmake, "--build", build, "-j", jobs, "--target", "dsm", "dsmd"])
    return build


class BuildWithCore(build_ext):
    """build_ext that first builds the C core and generates the CFFI source."""

    def run(self) -> None:
        build = cmake_build()
        sys.path.insert(0, os.path.join(ROOT, "pydsm"))
        try:
            import _build_ffi  # the cdef; compiled against the real headers
        finally:
            sys.path.pop(0)
        ffi = _build_ffi.configure([INCLUDE], [build])
        csource = os.path.join(build, "pydsm_ffi", "_dsm.c")
        os.makedirs(os.path.dirname(csource), exist_ok=True)
        ffi.emit_c_code(csource)
        for ext in self.extensions:
            if ext.name == "pydsm._dsm":
                ext.sources = [csource]
                ext.include_dirs = [INCLUDE]
                ext.library_dirs = [build]
                ext.libraries = ["dsm"]
                ext.extra_link_args = ["-Wl,-rpath,$ORIGIN", "-Wl,--enable-new-dtags"]
                ext.extra_compile_args = ["-Wno-unused-function"]
        super().run()
        inplace = self.inplace or getattr(self, "editable_mode", False)
        pkg = os.path.join(ROOT, "pydsm") if inplace else os.path.join(self.build_lib, "pydsm")
        self._ship(build, pkg)

    def _ship(self, build: str, pkg: str) -> None:
        os.makedirs(os.path.join(pkg, "bin"), exist_ok=True)
        shutil.copy2(os.path.realpath(os.path.join(build, "libdsm.so")), os.path.join(pkg, "libdsm.so"))
        shipped = ["libdsm.so"]
        for name in sorted(os.listdir(build)):
            path = os.path.join(build, name)
            if (name in ("dsmd", "dsm-memcached") or name.startswith("dsm-bench-")) and os.path.isfile(path) \
                    and os.access(path, os.X_OK):
                shutil.copy2(path, os.path.join(pkg, "bin", name))
                shipped.append(f"bin/{name}")
        if "bin/dsmd" not in shipped:
            raise RuntimeError(f"dsmd was not built in {build}")
        _log(f"shipped into {pkg}: {', '.join(shipped)}")


setup(
    ext_modules=[Extension("pydsm._dsm", sources=["pydsm/_build_ffi.py"])],
    cmdclass={"build_ext": BuildWithCore},
    zip_safe=False,
)
