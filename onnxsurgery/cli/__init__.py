"""Command line: a thin click layer, one module per group of commands (shrinking, quantizing,
npy, inspecting), their options declared once in the groups they share (options.py) and the
errors, paths and exit codes in common.py. Each command parses its options, calls one API
function (imported then, so that --help loads no onnx, onnxruntime or quantizer: its defaults
are in defaults.py) and renders its report. Library errors become one line on stderr and exit
code 2. A command's module is imported when the command is asked for (`_Commands`): `shrink`
loads no quant options, `quant` no inspecting ones."""

from __future__ import annotations

import importlib
import logging
import os

# One BLAS thread per worker, before numpy loads: the commands parallelise over weights
# (parallel.py) and onnxruntime has its own pool, so OpenBLAS's threads came on top of both and
# spun waiting for cores (a [96, 864] x [864, 512] product: 1 ms on one thread, 43 ms on two
# beside another process; ddddocr_det's quant --inputs 0.66x the CPU time, the same file). A
# value the user set stays.
for _variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import click  # noqa: E402

from .common import EXIT_ERROR, EXIT_INTERNAL  # noqa: E402

__all__ = ["main", "EXIT_ERROR", "EXIT_INTERNAL"]


class _Commands(click.Group):
    """The commands in the order a newcomer meets them, not alphabetically, each loaded from its
    module (HOMES) when first asked for."""

    ORDER = ("info", "shrink", "quant", "report", "compare", "run", "npy", "embed", "check")
    HOMES = {"info": "inspecting", "shrink": "shrinking", "quant": "quantizing", "report": "inspecting",
             "compare": "inspecting", "run": "npy", "npy": "npy", "embed": "npy", "check": "inspecting"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(self.commands) | set(self.HOMES)
        return sorted(names, key=lambda name: (self.ORDER + (name,)).index(name))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.HOMES:
            self.add_command(getattr(importlib.import_module(f"{__package__}.{self.HOMES[name]}"), name))
        return super().get_command(ctx, name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="onnxsurgery")
@click.option("-v", "--verbose", is_flag=True, help="Log what the passes do.")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars (they show only on a terminal anyway).")
@click.pass_context
def main(ctx: click.Context, verbose: bool, quiet: bool) -> None:
    """Make ONNX model files smaller without breaking them.

    Start with `onnxsurgery info MODEL`: where the bytes are and what each command would save.
    Then `shrink IN OUT` (lossless) or `quant IN OUT` (int8 weights, verified in onnxruntime);
    `report MODEL` measures every method on one page. `COMMAND --help` lists a command's options;
    docs/commands.md is the tour."""
    ctx.ensure_object(dict)["quiet"] = quiet
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")


