"""Builds the Go client as a C shared library and ships it in the package.

`pip install ./python` (or `python3 setup.py build`) runs
`go build -buildmode=c-shared` at the repository root, which holds go.mod:
the parent of this folder, or $PARAMSERV_SOURCE. A Go toolchain (1.26 or
newer, with cgo and a C compiler) is needed at install time; Go's module
cache must hold the repository's dependencies (GOFLAGS=-mod=mod and
GOPROXY as usual) when the machine is offline.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "libparamserv.so"


def repo_root():
    root = os.environ.get("PARAMSERV_SOURCE") or os.path.dirname(HERE)
    if not os.path.exists(os.path.join(root, "go.mod")):
        raise SystemExit(
            f"paramserv: no go.mod in {root}: build from a checkout of the repository "
            "(pip install ./python at its root), or set PARAMSERV_SOURCE to one")
    return root


class BuildGo(build_py):
    """build_py that also builds libparamserv.so into the package."""

    def run(self):
        super().run()
        go = shutil.which("go")
        if go is None:
            raise SystemExit("paramserv: the Go toolchain (go) is not on PATH: it builds the client library")
        out = os.path.abspath(os.path.join(self.build_lib, "paramserv", LIB))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        env = dict(os.environ, CGO_ENABLED="1")
        cmd = [go, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./python/native"]
        print("paramserv: running " + " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=repo_root(), env=env, check=True)
        header = out[: -len(".so")] + ".h"
        if os.path.exists(header):
            os.remove(header)


class BinaryDistribution(Distribution):
    """The wheel holds a native library: it is platform-specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildGo}, distclass=BinaryDistribution)
