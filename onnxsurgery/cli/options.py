"""Argument groups the commands share, one per concern (as Polygraphy's tools/args): each
group is declared once as a frozen dataclass whose fields carry their command-line spelling
(declare.py): QuantRequest (quantization/request.py) for what to store, which weights and where it
runs; run_options.py's Decision, Budget, Inputs, Verification and Output for the rest.
`declared_options(Group)` makes a field's click option, `group_from(Group, kwargs)` collects
the parsed values back into the group; a command's --help lists them under the group's title,
one line per option (the long explanations are in docs/quantization.md and docs/commands.md).

Where the model runs is one word, `--target`: any (standard ops, the default), onnxruntime
(com.microsoft kernels too), onnxruntime-web (standard ops, verified as the WASM build computes)
or tensorrt; `--memory` is how much memory it has there. The older `--runtime onnxruntime-web`
still works (hidden): it is `--target onnxruntime-web`, or, beside `--target onnxruntime`,
com.microsoft kernels verified as the web build computes them (run_options.QuantRun).
"""

from __future__ import annotations

import dataclasses

import click

from ..declare import OUTPUT, TITLES

GROUPS = TITLES  # the sections of --help, in this order


class GroupedOption(click.Option):
    """A click option that knows its group's title (`group`), for GroupedCommand's --help, and
    `first`: listed first in its group. Its help line carries no range (the error names it)."""

    def __init__(self, *args, group: str = OUTPUT, first: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.group, self.first = group, first

    def get_help_extra(self, ctx: click.Context):
        extra = super().get_help_extra(ctx)
        extra.pop("range", None)
        return extra


class GroupedCommand(click.Command):
    """A command whose --help lists its options under their groups' titles (GROUPS' order),
    one line per option at 80 columns, the names aligned across the groups."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows: dict[str, list[tuple[bool, str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is not None:
                group = rows.setdefault(getattr(param, "group", OUTPUT), [])
                group.append((not getattr(param, "first", False), *record))
        width = max((len(name) for group in rows.values() for _, name, _ in group), default=0)
        for title in [t for t in GROUPS if t in rows] + [t for t in rows if t not in GROUPS]:
            with formatter.section(title):
                formatter.write_dl([(name.ljust(width), text) for _, name, text in sorted(rows[title],
                                                                                          key=lambda r: r[0])],
                                   col_max=width)


def option(*decls, group: str, first: bool = False, **kwargs):
    """click.option for a GroupedOption in `group`."""
    return click.option(*decls, cls=GroupedOption, group=group, first=first, **kwargs)


def _samples(path):
    from ..running.samples import load_input_samples

    return load_input_samples(path)


def _shapes(specs):
    from ..running.feeds import parse_shapes

    return parse_shapes(specs)


# From what is typed to the API's value (a field's `parse`, declare.py); None stays None
PARSERS = {
    "samples": _samples,  # an .npz of inputs
    "shapes": _shapes,  # NAME:DxD, repeated
    "names": lambda names: tuple(names) or None,
    "negate": lambda flag: not flag,  # --no-merge, --no-verify
    "megabytes": lambda mb: int(mb * 1e6),
    "gigabytes": lambda gb: int(gb * 1e9),
}
_NUMBERS = {"megabytes", "gigabytes"}


def declared_options(group, only: tuple[str, ...] | None = None):
    """A decorator adding one click option per declared field of `group` (those in `only`, if
    given), under the section its field names; the command receives each as a keyword argument
    named after the field."""
    def decorate(fn):
        for f in reversed(dataclasses.fields(group)):
            meta = f.metadata
            if not meta.get("flag") or (only is not None and f.name not in only):
                continue
            kwargs: dict = {"help": meta["help"], "metavar": meta.get("metavar"), "hidden": meta.get("hidden", False)}
            if "choices" in meta:
                kwargs["type"] = click.Choice(list(meta["choices"]))
            elif "min" in meta:
                kwargs["type"] = click.IntRange(min=meta["min"], max=meta.get("max"))
            elif meta.get("positive") or meta.get("parse") in _NUMBERS:
                kwargs["type"] = click.FloatRange(min=0, min_open=True)
            elif meta.get("number"):
                kwargs["type"] = float
            elif meta.get("path") or meta.get("parse") == "samples":
                kwargs["type"] = click.Path(dir_okay=False)
            if meta.get("is_flag") or meta.get("parse") == "negate":
                kwargs["is_flag"] = True
            elif meta.get("multiple"):
                kwargs["multiple"] = True
            else:  # a value parsed from what is typed has none until typed
                kwargs["default"] = None if meta.get("parse") else f.default
            fn = option(meta["flag"], f.name, group=meta["group"], first=meta.get("first", False), **kwargs)(fn)
        return fn

    return decorate


def group_from(group, kwargs: dict, only: tuple[str, ...] | None = None):
    """The `group` in a command's keyword arguments (which it removes from them), each value
    parsed as its field declares."""
    values = {}
    for f in dataclasses.fields(group):
        if not f.metadata.get("flag") or (only is not None and f.name not in only):
            continue
        value = kwargs.pop(f.name)
        parse = f.metadata.get("parse")
        if parse == "negate":
            values[f.name] = PARSERS[parse](value)
        elif parse and value not in (None, ()):
            values[f.name] = PARSERS[parse](value)
        elif not parse:
            values[f.name] = tuple(value) if isinstance(value, list) else value
    return group(**values)
