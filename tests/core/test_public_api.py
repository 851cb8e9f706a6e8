"""The public API: ``damc_core.__all__`` is sorted, complete and importable."""

from __future__ import annotations

import importlib
import types

import damc_core


def isort_key(name: str) -> tuple[int, str]:
    """How ruff (RUF022) orders ``__all__``: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_all_is_sorted():
    assert damc_core.__all__ == sorted(damc_core.__all__, key=isort_key)
    assert len(set(damc_core.__all__)) == len(damc_core.__all__)


def test_every_exported_name_is_importable():
    module = importlib.import_module("damc_core")
    for name in damc_core.__all__:
        assert getattr(module, name) is not None, name

    namespace: dict[str, object] = {}
    exec("from damc_core import *", namespace)
    assert set(damc_core.__all__) <= set(namespace)


def test_every_public_member_is_exported():
    public = {
        name
        for name, value in vars(damc_core).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }

    assert public == set(damc_core.__all__)
