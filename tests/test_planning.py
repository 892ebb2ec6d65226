"""One planning run answers every question about a weight (issue 56, choices/planning.py): in one
`quant` or `info` run, the stage chain (forms.site_form, forms.choose_scheme, rules.lowering_for)
runs at most once per weight and distinct (options, opset), whoever asks: the opset the options
need, whether any weight changes, the plan, `info`'s estimates. Counted on the functions' own
code, so that a caller going around the planning run is counted too."""

from __future__ import annotations

import sys
from collections import Counter

import onnx
import pytest
from click.testing import CliRunner

import builders
from onnxsurgery.cli import main
from onnxsurgery.quantization.choices import forms, rules
from onnxsurgery.quantization.choices.planning import options_key, planning_for

STAGES = {forms.site_form.__code__: "form", forms.choose_scheme.__code__: "scheme",
          rules.lowering_for.__code__: "lowering"}


class StageCalls:
    """Each stage call as (stage, weight, options, opset), counted; the weights held, so that no
    id is reused while counting. A scheme chosen inside site_form is that stage's own work."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.held: list = []

    def __call__(self, frame, event, arg):
        stage = STAGES.get(frame.f_code) if event == "call" else None
        if stage is None or (stage == "scheme" and frame.f_back.f_code is forms.site_form.__code__):
            return
        site, options = frame.f_locals["site"], frame.f_locals["options"]
        self.held.append(site.tensor)
        self.counts[stage, id(site.tensor), options_key(options), frame.f_locals.get("opset")] += 1

    def __enter__(self):
        sys.setprofile(self)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "in.onnx"
    onnx.save(builders.quant_cases(), str(path))
    return path


@pytest.mark.parametrize("command", ["quant", "dry-run", "info"])
@pytest.mark.parametrize("options", [[], ["--dtype", "int4"], ["--target", "onnxruntime", "--dtype", "int4"]],
                         ids=["default", "int4", "int4-ort"])
def test_the_stage_chain_runs_once_per_options_and_opset(tmp_path, model_path, command, options):
    args = {"quant": ["quant", model_path, tmp_path / "out.onnx", "--min-elements", "1024", *options],
            "dry-run": ["quant", model_path, "--dry-run", "--min-elements", "1024", *options],
            "info": ["info", model_path]}[command]
    with StageCalls() as calls:
        r = CliRunner().invoke(main, ["-q", *map(str, args)])
    assert r.exit_code == 0, r.output
    assert {stage for stage, *_ in calls.counts} == {"form", "scheme", "lowering"}
    again = {key: n for key, n in calls.counts.items() if n > 1}
    assert not again, f"stages run again for the same weight, options and opset: {again}"


def test_a_changed_graph_is_planned_afresh(model_path):
    """A graph rewired since (a merge, the quantization) is another state: its planning run is
    new; asked again unchanged, the same one."""
    import onnx_graphsurgeon as gs

    graph = gs.import_onnx(onnx.load(str(model_path)))
    first = planning_for(graph)
    assert planning_for(graph) is first
    node = next(n for n in graph.nodes if n.op == "MatMul")
    node.inputs[1] = gs.Constant("W_new", node.inputs[1].values.copy())
    assert planning_for(graph) is not first


# The planner's stage modules (planner.STAGES and the measured ones it adapts)
STAGE_MODULES = ("refusals", "forms", "rules", "memory_at_load", "channel_axis", "lean", "symmetry", "records")
PACKAGE = "onnxsurgery.quantization.choices"


def _stage_imports() -> set[tuple[str, str]]:
    """(stage module, stage module it imports), from the source: any `import` or `from` at all."""
    import ast
    from pathlib import Path

    choices = Path(__file__).resolve().parent.parent / "onnxsurgery" / "quantization" / "choices"
    found = set()
    for stage in STAGE_MODULES:
        for node in ast.walk(ast.parse((choices / f"{stage}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE):
                names = [node.module.rsplit(".", 1)[-1]] + [alias.name for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name.rsplit(".", 1)[-1] for alias in node.names
                         if alias.name.startswith(PACKAGE + ".")]
            else:
                continue
            found.update((stage, name) for name in names if name in STAGE_MODULES and name != stage)
    return found


def test_no_stage_module_imports_another():
    """Each stage reads what earlier ones decided on the Candidate or the PlanContext, and the
    facts and the measure they share from weights.py and measures.py: none imports another
    (issue 56)."""
    imports = _stage_imports()
    assert imports == set(), f"a stage imports another: {sorted(imports)}"


def test_the_planner_runs_its_stages_in_order():
    """The planner is a list of functions from candidates and one context to candidates, run in
    order: the first four are the stage modules' own entries."""
    from onnxsurgery.quantization.choices import planner, refusals

    assert planner.STAGES[:4] == (forms.own_options, refusals.refuse, forms.group, rules.lower)
    assert planner.STAGES[-1].__module__.endswith("choices.records")
