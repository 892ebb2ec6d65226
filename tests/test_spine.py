"""docs/design.md's spine is the order a real `quant` call reaches each module: the call runs
here (the CLI in process, a tiny model, verification on) under a profiler that notes the first
call of every function of the package, and each line of the drawing not marked `[...]` must be
reached, each first reached after the line above it. Moving a step (the check after the
write, the opset upgrade after the passes) fails here until the drawing moves with it."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path

import onnx
from click.testing import CliRunner
from onnx import helper, numpy_helper

import builders
from onnxsurgery.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _spine() -> list[tuple[str, bool]]:
    """(name, optional) for each line of the drawing; `[...]` descriptions are optional."""
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    block = re.search(r"### The spine.*?```text\n(.*?)```", text, re.S).group(1)
    lines = [line for line in block.splitlines() if line and not line[0].isspace()]
    return [(line.split()[0], line.split(None, 1)[1].startswith("[")) for line in lines]


def _resolve(name: str):
    """The module, class or function a spine name stands for."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value = importlib.import_module("onnxsurgery." + ".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            value = inspect.getattr_static(value, attr) if isinstance(value, type) else getattr(value, attr)
        return value
    raise AssertionError(f"{name} is no module of onnxsurgery")


def _matches(target):
    """A predicate on code objects: the code of `target` (a function, a method, a property),
    any method of a class, any function of a module (not its body, nor a class body)."""
    if inspect.ismodule(target):
        file = target.__file__
        classes = {n for n, v in vars(target).items() if isinstance(v, type)}
        return lambda code: code.co_filename == file and code.co_name != "<module>" and code.co_qualname not in classes
    if isinstance(target, type):
        file, prefix = inspect.getfile(target), target.__qualname__ + "."
        return lambda code: code.co_filename == file and code.co_qualname.startswith(prefix)
    if isinstance(target, (classmethod, staticmethod)):
        target = target.__func__
    if isinstance(target, property):
        target = target.fget
    target = getattr(target, "callback", target)  # a click command: its function
    wanted = inspect.unwrap(target).__code__
    return lambda code: code is wanted


def test_a_quant_call_reaches_the_spine_in_its_order(tmp_path):
    w = builders.rand((64, 64), 1)
    model = builders.model([helper.make_node("MatMul", ["x", "W"], ["y"])], [builders.vi("x", shape=[2, 64])],
                           [builders.vi("y", shape=[2, 64])], [numpy_helper.from_array(w, "W")])
    onnx.save(model, str(tmp_path / "m.onnx"))
    package = str(ROOT / "onnxsurgery")
    first: dict = {}

    def note(frame, event, arg):
        if event == "call" and frame.f_code not in first and frame.f_code.co_filename.startswith(package):
            first[frame.f_code] = len(first)

    sys.setprofile(note)
    try:
        result = CliRunner().invoke(main, ["quant", str(tmp_path / "m.onnx"), str(tmp_path / "o.onnx"),
                                           "--min-elements", "16"])
    finally:
        sys.setprofile(None)
    assert result.exit_code == 0, result.output
    order = sorted(first, key=first.get)
    previous, previous_at = None, -1
    for name, optional in _spine():
        match = _matches(_resolve(name))
        at = next((i for i, code in enumerate(order) if match(code)), None)
        if optional:
            continue
        assert at is not None, f"the spine names {name}, which a quant call never reaches"
        assert at > previous_at, f"a quant call reaches {name} before {previous}, which the spine draws above it"
        previous, previous_at = name, at
