"""How an option group declares itself once for the Python API, the CLI and its reference: each
field of a frozen dataclass (quantization/request.py's QuantRequest, run_options.py's groups) carries
its command-line spelling as plain data in its metadata, and cli/options.py turns that into
click options (as Polygraphy's tools/args groups declare theirs, but with the API's own types).

The titles are the sections `quant --help` lists options under, in this order."""

from __future__ import annotations

import dataclasses

STORE, WEIGHTS, WHERE, CHECKS, OUTPUT = "What to store", "Which weights", "Where it runs", "Checks", "Output"
TITLES = (STORE, WEIGHTS, WHERE, CHECKS, OUTPUT)


def declared(default, flag: str, help: str, group: str, **cli) -> dataclasses.Field:
    """A field and how the CLI spells it: `flag` ("--x", "--x/--no-x" for a boolean, or "" for
    none: the API's only), `help` (one line for --help; the docs explain), `group` (one of
    TITLES), and click's keywords as plain data: choices, min, max, is_flag, multiple, metavar,
    hidden, first (listed first in its section), and `parse`: the name of the converter
    (cli/options.PARSERS) from what is typed to the API's value (a path to its samples, MB to
    bytes)."""
    return dataclasses.field(default=default, metadata={"flag": flag, "help": help, "group": group, **cli})


def flags_of(group) -> list[str]:
    """The command-line flags asking for `group`'s non-default fields (values the CLI parses,
    such as samples, are named by their flag alone)."""
    out: list[str] = []
    for f in dataclasses.fields(group):
        value, flag = getattr(group, f.name), f.metadata.get("flag")
        if value == f.default or not flag:
            continue
        if "/" in flag:
            out.append(flag.split("/")[0 if value else 1])
        elif f.metadata.get("is_flag") or f.metadata.get("parse"):
            out.append(flag)
        elif f.metadata.get("multiple"):
            out.extend(x for v in value for x in (flag, v))
        else:
            out.extend((flag, str(value)))
    return out
