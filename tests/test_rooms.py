"""Storage and running models are packages of their own (issue 56), each with a public face: its
`__init__.py` lists what the other packages use. Here, from the source: every name a module
outside a room imports from it is listed there and public, and every listed name exists."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "onnxsurgery"
ROOMS = ("storage", "running")


def _imports_from(room: str) -> set[tuple[str, str, str]]:
    """(importing module, module of the room, name) for every `from ... import` into `room` made
    by a module of onnxsurgery outside it."""
    prefix = f"onnxsurgery.{room}"
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts).removesuffix(".__init__")
        if module == prefix or module.startswith(prefix + "."):
            continue
        base = list(parts[:-1])
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level == 0:
                source = node.module or ""
            else:
                source = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            if source == prefix or source.startswith(prefix + "."):
                found.update((module, source, alias.name) for alias in node.names)
    return found


@pytest.mark.parametrize("room", ROOMS)
def test_other_packages_use_only_the_face(room):
    face = importlib.import_module(f"onnxsurgery.{room}")
    used = _imports_from(room)
    assert used, f"nothing imports from onnxsurgery.{room}?"
    for module, source, name in sorted(used):
        assert not name.startswith("_"), f"{module} imports the private {source}.{name}"
        assert name in face.__all__, f"{module} imports {source}.{name}, which {room}/__init__.py does not list"
        if source != face.__name__:  # imported from its module: the face names the same object
            assert getattr(face, name) is getattr(importlib.import_module(source), name)


@pytest.mark.parametrize("room", ROOMS)
def test_the_face_names_what_exists(room):
    face = importlib.import_module(f"onnxsurgery.{room}")
    for name in face.__all__:
        assert not name.startswith("_") and getattr(face, name) is not None
    with pytest.raises(AttributeError):
        face.no_such_name  # noqa: B018


def test_old_public_spellings_still_work():
    """The public name `npy` (docs/commands.md: its load_feeds), load_model and save_model."""
    import onnxsurgery as package  # (as: tools that rewrite imports of the moved modules leave this be)
    from onnxsurgery.storage import io, npy, staging

    assert package.npy is npy and "npy" in package.__all__
    assert package.load_model is io.load_model and package.save_model is staging.save_model
