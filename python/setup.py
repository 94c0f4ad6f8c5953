"""Builds the Go client as a C shared library and ships it in the package.

`pip wheel ./python` (or `pip install ./python`, `python3 setup.py
bdist_wheel`) runs `go build -buildmode=c-shared` at the repository root,
which holds go.mod: the parent of this folder, or $PARAMSERV_SOURCE. A Go
toolchain (1.26 or newer, with cgo and a C compiler) is needed at build
time only; Go's module cache must hold the repository's dependencies
(GOFLAGS=-mod=mod and GOPROXY as usual) when the machine is offline.

The wheel is tagged py3-none-<platform>: the library is loaded with ctypes,
so one wheel serves every Python 3 on the platform it was built on, and
`pip install paramserv-*.whl` there takes seconds and needs no Go.

The build says what it runs and about how long it takes, and prints a line
every 30 seconds meanwhile: on the terminal pip runs in (pip hides a
build's own output without -v), else on stderr, which `pip wheel -v` shows.
"""

import os
import shutil
import subprocess
import sys
import threading
import time

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:
    from wheel.bdist_wheel import bdist_wheel
except ImportError:  # no wheel package: sdists and in-place builds only
    bdist_wheel = None

HERE = os.path.dirname(os.path.abspath(__file__))
LIB = "libparamserv.so"


def repo_root():
    root = os.environ.get("PARAMSERV_SOURCE") or os.path.dirname(HERE)
    if not os.path.exists(os.path.join(root, "go.mod")):
        raise SystemExit(
            f"paramserv: no go.mod in {root}: build from a checkout of the repository "
            "(pip wheel ./python at its root), or set PARAMSERV_SOURCE to one")
    return root


def _terminal():
    """Where the build's progress goes: the terminal pip runs in, when it
    has one (pip keeps a build's own output to itself unless -v is given,
    and a silent compile of minutes reads as a hang), else stderr, which
    pip -v and a log show."""
    if sys.stderr.isatty():
        return sys.stderr
    try:
        return open("/dev/tty", "w")
    except OSError:  # no controlling terminal: CI, a container, a service
        return sys.stderr


_OUT = None


def say(msg):
    global _OUT
    if _OUT is None:
        _OUT = _terminal()
    print("paramserv: " + msg, file=_OUT, flush=True)


class BuildGo(build_py):
    """build_py that also builds libparamserv.so into the package."""

    def run(self):
        super().run()
        go = shutil.which("go")
        if go is None:
            raise SystemExit("paramserv: the Go toolchain (go) is not on PATH: it builds the client library "
                             "(or install a wheel built elsewhere: pip install paramserv-*.whl needs no Go)")
        out = os.path.abspath(os.path.join(self.build_lib, "paramserv", LIB))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        env = dict(os.environ, CGO_ENABLED="1")
        # -v names each package as it is compiled (none that Go's build
        # cache holds); -s -w leave out the symbol table and DWARF (a third
        # of the library), not the names in a Go stack trace.
        cmd = [go, "build", "-v", "-buildmode=c-shared", "-trimpath", "-ldflags=-s -w", "-o", out, "./python/native"]
        cache = subprocess.run([go, "env", "GOCACHE"], capture_output=True, text=True).stdout.strip()
        say("compiling the Go client library, " + " ".join(cmd[1:]) + f" (in {repo_root()})")
        say("this takes about a minute when Go's build cache (" + (cache or "GOCACHE") +
            ") holds the dependencies, about 5 on a cold cache on 2 cores (374 packages); pip -v lists them as they compile")
        start = time.monotonic()
        done = threading.Event()

        def heartbeat():
            while not done.wait(30):
                say(f"still compiling ({time.monotonic() - start:.0f}s)")

        t = threading.Thread(target=heartbeat, daemon=True)
        t.start()
        try:
            subprocess.run(cmd, cwd=repo_root(), env=env, check=True)
        finally:
            done.set()
            t.join()
        header = out[: -len(".so")] + ".h"
        if os.path.exists(header):
            os.remove(header)
        say(f"built {LIB} ({os.path.getsize(out) / 2**20:.0f} MiB) in {time.monotonic() - start:.0f}s")


class BinaryDistribution(Distribution):
    """The wheel holds a native library: it is platform-specific."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildGo}

if bdist_wheel is not None:
    class PlatformWheel(bdist_wheel):
        """A wheel for any Python 3 on this platform: the library is loaded
        with ctypes, not built against Python's ABI."""

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = PlatformWheel

setup(cmdclass=cmdclass, distclass=BinaryDistribution)
