"""The wheel scripts/test builds (pip wheel ./python) and installs in a venv
without Go: one wheel for any Python 3 on the platform, holding the client
library, which the installed package loads from its own folder."""

import glob
import os
import zipfile

import pytest

import paramserv
from paramserv import _client


def _wheel():
    d = os.environ.get("PARAMSERV_WHEEL_DIR")
    if not d:
        pytest.skip("no wheel to check: scripts/test builds one (PARAMSERV_WHEEL_DIR)")
    found = glob.glob(os.path.join(d, "paramserv-*.whl"))
    assert len(found) == 1, f"want one paramserv wheel in {d}, found {found}"
    return found[0]


def test_wheel_is_for_any_python3_on_this_platform():
    name = os.path.basename(_wheel())
    # paramserv-VERSION-py3-none-PLATFORM.whl: ctypes loads the library, so
    # no CPython ABI tag; a platform tag, as the library is native.
    parts = name[: -len(".whl")].split("-")
    assert parts[2:4] == ["py3", "none"], name
    assert parts[4] != "any", name


def test_wheel_holds_the_library():
    with zipfile.ZipFile(_wheel()) as z:
        names = set(z.namelist())
        for want in ("paramserv/libparamserv.so", "paramserv/_client.py", "paramserv/torch.py", "paramserv/py.typed"):
            assert want in names, f"{want} not in the wheel: {sorted(names)}"
        assert "paramserv/libparamserv.h" not in names
        assert z.getinfo("paramserv/libparamserv.so").file_size > 1 << 20


def test_installed_package_loads_its_own_library(monkeypatch):
    _wheel()
    monkeypatch.delenv("PARAMSERV_LIB", raising=False)
    here = os.path.dirname(os.path.abspath(paramserv.__file__))
    assert _client._library_path() == os.path.join(here, "libparamserv.so")
    assert os.path.exists(_client._library_path())
    _client._load()
