"""Argument groups the commands share, one per concern (as Polygraphy's tools/args): each group
declares its own click options, and a command's --help lists them under the group's title, one
line per option (the long explanations are in docs/quantization.md and docs/commands.md).

quant's groups: what to store, which weights, where it runs, checks, output. Its request options
(what to store, which weights, --target and --keep-quantized) come from QuantRequest's own
declaration (quant/request.py), each field naming its group, so that the CLI, the API and the
CLI reference cannot drift apart.

Where the model runs is one word, `--target`: any (standard ops, the default), onnxruntime
(com.microsoft kernels too), onnxruntime-web (standard ops, verified as the WASM build computes)
or tensorrt; `--memory` is how much memory it has there. The older `--runtime onnxruntime-web`
still works (hidden): it is `--target onnxruntime-web`, or, beside `--target onnxruntime`,
com.microsoft kernels verified as the web build computes them.
"""

from __future__ import annotations

import dataclasses

import click

from .quant.request import QuantRequest

REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(QuantRequest))

# The groups' titles, in the order --help lists them; a request field's `group` names one.
STORE = "What to store"
WEIGHTS = "Which weights"
WHERE = "Where it runs"
CHECKS = "Checks"
OUTPUT = "Output"
GROUPS = (STORE, WEIGHTS, WHERE, CHECKS, OUTPUT)


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


def request_options(fn):
    """One click option per QuantRequest field, in the declaration's order, under the group the
    field names; the command receives them as keyword arguments named after the fields
    (`request_from(kwargs)` collects them)."""
    for f in reversed(dataclasses.fields(QuantRequest)):
        meta = f.metadata
        kwargs: dict = {"help": meta["help"], "metavar": meta.get("metavar")}
        if "choices" in meta:
            kwargs["type"] = click.Choice(list(meta["choices"]))
        elif "min" in meta:
            kwargs["type"] = click.IntRange(min=meta["min"], max=meta.get("max"))
        if meta.get("is_flag"):
            kwargs["is_flag"] = True
        elif meta.get("multiple"):
            kwargs["multiple"] = True
        else:
            kwargs["default"] = f.default
        fn = option(meta["flag"], f.name, group=meta["group"], first=meta.get("first", False), **kwargs)(fn)
    return fn


def request_from(kwargs: dict) -> QuantRequest:
    """The QuantRequest in a command's keyword arguments, which it removes from them; the hidden
    `--runtime` alias (module doc) is read here too and left in them."""
    fields = {name: kwargs.pop(name) for name in REQUEST_FIELDS}
    if kwargs.get("runtime") == "onnxruntime-web" and fields["target"] == "any":
        fields["target"] = "onnxruntime-web"
    return QuantRequest.of(**fields)


def where_options(fn):
    """quant's --memory and the hidden --runtime, beside the request's --target."""
    fn = option("--memory", type=click.FloatRange(min=0, min_open=True), metavar="GB", group=WHERE,
                help="Its memory [default: this machine's].")(fn)
    fn = option("--runtime", type=click.Choice(["onnxruntime", "onnxruntime-web"]), default="onnxruntime",
                hidden=True, group=WHERE,
                help="Before --target onnxruntime-web: verify as that runtime computes.")(fn)
    return fn


def headline_option(fn):
    return option("--outputs", "outputs", multiple=True, metavar="NAME", group=CHECKS,
                  help="Outputs the error is over. Repeatable.")(fn)


def verification_options(fn):
    fn = option("--inputs", "inputs_npz", type=click.Path(dir_okay=False), metavar="FILE", group=CHECKS,
                help="Real inputs (.npz) [default: generated].")(fn)
    fn = option("--shape", "shapes", multiple=True, metavar="NAME:DxD", group=CHECKS,
                help="Fix a generated input's shape. Repeatable.")(fn)
    return fn
