"""Public names of a package that load on first use (PEP 562): `storage` and `running` list
each name with the module that defines it, and importing the package imports none of them."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, homes: dict[str, str],
                 modules: tuple[str, ...]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`: a name of `homes` (name -> module) or one of
    its `modules`, imported when first asked for and kept in the package's namespace."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str):
        if name in homes:
            value = getattr(importlib.import_module(f"{package}.{homes[name]}"), name)
        elif name in modules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
