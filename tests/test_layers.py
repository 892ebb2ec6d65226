"""The code's layers: imports read top to bottom (no cycle; the report above the API, never the
reverse), and `import onnxsurgery` / `onnxsurgery --help` stay light: no onnxruntime, no
quantizers (nor onnx, onnx-graphsurgeon or numpy, which are most of the time such a start takes).
Timings are not asserted (this machine's load varies): the modules loaded stand in for them."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import onnxsurgery

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "onnxsurgery"
HEAVY = ("onnxruntime", "onnx", "onnx_graphsurgeon", "numpy")
QUANTIZERS = ("onnxsurgery.quantization", "onnxsurgery.passes.quantize_weights")


def _loaded_by(code: str) -> list[str]:
    """The modules loaded in a fresh interpreter after running `code`."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


# What a quant request is (plain data: the CLI builds its options from it), not a quantizer
DECLARATIONS = ("onnxsurgery.quantization", "onnxsurgery.quantization.request", "onnxsurgery.quantization.vocabulary")


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY or (m.startswith(QUANTIZERS) and m not in DECLARATIONS)]


def test_import_loads_no_runtime_and_no_quantizer():
    assert _heavy(_loaded_by("import onnxsurgery")) == []


def test_help_loads_no_runtime_and_no_quantizer():
    for args in (["--help"], ["quant", "--help"], ["report", "--help"]):
        proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "onnxsurgery", *args], cwd=ROOT,
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "Usage:" in proc.stdout
        # -X importtime: "import time: self [us] | cumulative | <indent>module" per import, on stderr
        imported = [line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
                    if line.startswith("import time:") and "|" in line]
        assert "onnxsurgery.cli" in imported
        assert _heavy(imported) == [], f"onnxsurgery {' '.join(args)} loads {_heavy(imported)}"


def test_public_names_load_on_first_use():
    for name in onnxsurgery.__all__:
        assert getattr(onnxsurgery, name) is not None
    from onnxsurgery import QuantOptions, quant_file
    from onnxsurgery.quantization.options import QuantOptions as defined

    assert QuantOptions is defined and quant_file is onnxsurgery.api.quant_file
    assert set(onnxsurgery.__all__) <= set(dir(onnxsurgery))


def test_quant_stays_the_function_whatever_loads_first():
    """`onnxsurgery.quant` is the API function whatever loads first (the subpackage was also
    named quant/ until issue 51; it is quantization/), and gs logs through `logging`."""
    code = ("from onnxsurgery.quantization.options import QuantOptions\nimport onnxsurgery\n"
            "assert callable(onnxsurgery.quant), onnxsurgery.quant\n"
            "from onnxsurgery import quant\nassert quant is onnxsurgery.api.quant\n"
            "from onnx_graphsurgeon.logger import G_LOGGER\nfrom onnxsurgery.logs import _forward\n"
            "assert G_LOGGER.log is _forward, 'gs logs through logging'")
    assert "onnxsurgery.api" in _loaded_by(code)


def test_defaults_shown_in_help_are_the_ones_used():
    """defaults.py holds, as plain constants, what --help shows and the heavier modules use: the
    API's own defaults are the same values (merge's min_elements is not quant's)."""
    import inspect

    from onnxsurgery import api, defaults, evaluate
    from onnxsurgery.passes import merge_constants
    from onnxsurgery.run_options import NpyRun, ShrinkRun
    from onnxsurgery.quantization.options import QuantOptions

    def default(fn, name):
        return inspect.signature(fn).parameters[name].default

    assert default(api.info, "min_elements") == defaults.MERGE_MIN_ELEMENTS == 16
    for run in (merge_constants.MergeDuplicates(), ShrinkRun(), NpyRun()):
        assert run.min_elements == defaults.MERGE_MIN_ELEMENTS, run
    assert QuantOptions().min_elements == defaults.QUANT_MIN_ELEMENTS == 4096
    assert QuantOptions().block_size == defaults.QUANT_BLOCK_SIZE
    assert tuple(m.key for m in evaluate.METHODS) == defaults.METHOD_KEYS


def test_lowerings_named_once():
    """quantization/vocabulary.py names the lowerings for the CLI, the options and the plan; the
    registry (one module per lowering) holds exactly those, and --lowering offers some."""
    from onnxsurgery.quantization.lowerings import REGISTRY
    from onnxsurgery.quantization.request import CLI_LOWERINGS
    from onnxsurgery.quantization.vocabulary import INTEGER_LOWERINGS

    assert sorted(REGISTRY) == sorted(INTEGER_LOWERINGS)
    assert CLI_LOWERINGS == ("auto", "dq", "arith", "scaled")


def _import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (anywhere in it, functions included), from the
    source. A package's __init__ importing its own submodules, and a module importing its
    parent package, are not edges (as in the layers check of the repository's hooks)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        modules[dotted.removesuffix(".__init__")] = path
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        init = path.name == "__init__.py"
        base = module.split(".") if init else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level == 0:
                    source = node.module or ""
                else:
                    source = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
                names = [source] + [f"{source}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in modules:
                    name = name.rpartition(".")[0]
                if (name and name != module and not module.startswith(name + ".")
                        and not (init and name.startswith(module + "."))):
                    edges[module].add(name)
    return edges


def _find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path [a, b, ..., a], or None."""
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for target in sorted(edges[module]):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(edges):
        cycle = visit(module)
        if cycle:
            return cycle
    return None


def test_no_import_cycle():
    cycle = _find_cycle(_import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_api_does_not_import_the_report():
    edges = _import_graph()
    report = {"onnxsurgery.evaluate", "onnxsurgery.html_report"}
    for module, targets in edges.items():
        if module == "onnxsurgery.api" or module.startswith("onnxsurgery.api."):
            assert not targets & report, f"{module} imports {targets & report}"


def test_design_draws_the_spine_as_it_is():
    """docs/design.md draws a quant call's path one module a line: each name on the left (a
    module of the package, then attributes) exists, so a rename cannot leave the drawing behind
    (tests/test_spine.py checks the order a real call reaches them in)."""
    import importlib
    import re

    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    block = re.search(r"### The spine.*?```text\n(.*?)```", text, re.S).group(1)
    names = [line.split()[0] for line in block.splitlines() if line and not line[0].isspace()]
    assert len(names) > 15 and names[0] == "cli.quantizing.quant" and names[-1] == "storage.staging.StagedModel.commit"
    for name in names:
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix that is a module
            try:
                value = importlib.import_module("onnxsurgery." + ".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attr in parts[cut:]:
                assert hasattr(value, attr), f"docs/design.md names {name}: no {attr}"
                value = getattr(value, attr)
            break
        else:
            raise AssertionError(f"docs/design.md names {name}, which is no module of onnxsurgery")
