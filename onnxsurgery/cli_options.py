"""Argument groups the commands share (as Polygraphy's tools/args): the quant request's options,
built from QuantRequest's own declaration (quant/request.py) so that the CLI, the API and the
CLI reference cannot drift apart, and the verification inputs."""

from __future__ import annotations

import dataclasses

import click

from .quant.request import QuantRequest

REQUEST_FIELDS = tuple(f.name for f in dataclasses.fields(QuantRequest))


def request_options(fn):
    """One click option per QuantRequest field, in the declaration's order; the command receives
    them as keyword arguments named after the fields (`request_from(kwargs)` collects them)."""
    for f in reversed(dataclasses.fields(QuantRequest)):
        meta = f.metadata
        help_text = meta["help"]
        kwargs: dict = {"help": help_text}
        if "choices" in meta:
            kwargs["type"] = click.Choice(list(meta["choices"]))
        elif "min" in meta:
            kwargs["type"] = click.IntRange(min=meta["min"], max=meta.get("max"))
        if meta.get("is_flag"):
            kwargs["is_flag"] = True
        elif meta.get("multiple"):
            kwargs.update(multiple=True, metavar=meta.get("metavar"))
        else:
            kwargs["default"] = f.default
            if f.default is not None:
                kwargs["show_default"] = True
            elif "shown" in meta:
                kwargs["help"] = f"{help_text}  [default: {meta['shown']}]"
        fn = click.option(meta["flag"], f.name, **kwargs)(fn)
    return fn


def request_from(kwargs: dict) -> QuantRequest:
    """The QuantRequest in a command's keyword arguments, which it removes from them."""
    return QuantRequest.of(**{name: kwargs.pop(name) for name in REQUEST_FIELDS})


def headline_option(fn):
    return click.option("--outputs", "outputs", multiple=True, metavar="NAME",
                        help="The outputs the headline error is over. Repeatable. [default: every output but a "
                        "KV cache's present*]")(fn)


def verification_options(fn):
    fn = click.option("--inputs", "inputs_npz", type=click.Path(dir_okay=False),
                      help="Real inputs: an .npz by input name (name__0, name__1, ... for several "
                      "samples). Default: generated from the declared dtypes and shapes.")(fn)
    fn = click.option("--shape", "shapes", multiple=True, metavar="NAME:DxD",
                      help="Fix dynamic dimensions of a generated input, e.g. x:1x3x224x224.")(fn)
    return fn
