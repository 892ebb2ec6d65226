"""Write docs/cli.md, the CLI reference, from the commands' own --help (sqlite-utils' way).
tests/test_docs.py checks that the committed file is current: run this after changing an option.

    python docs/make_cli_reference.py
"""

from __future__ import annotations

from pathlib import Path

import click

from onnxsurgery.cli import main

HEADER = """# CLI reference

Generated from `--help` by `docs/make_cli_reference.py`; `make test` checks it is current.
"""


def reference() -> str:
    parts = [HEADER]
    settings = dict(main.context_settings, terminal_width=100, max_content_width=100)
    with click.Context(main, info_name="onnxsurgery", **settings) as ctx:
        parts.append(f"## onnxsurgery\n\n```text\n{main.get_help(ctx)}\n```\n")
        for name in main.list_commands(ctx):
            command = main.get_command(ctx, name)
            with click.Context(command, info_name=name, parent=ctx, **settings) as sub:
                parts.append(f"## onnxsurgery {name}\n\n```text\n{command.get_help(sub)}\n```\n")
    return "\n".join(parts)


if __name__ == "__main__":
    path = Path(__file__).with_name("cli.md")
    path.write_text(reference())
    print(f"wrote {path}")
