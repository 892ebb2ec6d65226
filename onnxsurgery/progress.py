"""Progress bars on stderr for work that takes more than about a second (tqdm).

Off unless the CLI turns them on (`enable`), which it does only when stderr is a terminal and
neither `-q` nor `--json` is given: a library caller, a pipe or a log file sees nothing. A bar
appears only once its work has run for DELAY seconds, so quick runs stay quiet.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Iterable, TypeVar

T = TypeVar("T")
DELAY = float(os.environ.get("ONNXSURGERY_PROGRESS_DELAY", "1.0"))  # the tests set 0
_enabled = False


def enable(on: bool = True) -> None:
    global _enabled
    _enabled = on


def wanted(quiet: bool, as_json: bool) -> bool:
    """What the CLI enables: a terminal on stderr, and no -q or --json."""
    return sys.stderr.isatty() and not quiet and not as_json


def progress(items: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> Iterable[T]:
    """`items`, with a bar when enabled."""
    if not _enabled:
        return items
    from tqdm import tqdm

    # a terminal that reports no size (a bare pty) would hide the bar (tqdm draws within the
    # screen's rows): 80 x 24 then
    size = shutil.get_terminal_size((80, 24))
    return tqdm(items, desc=desc, total=total, unit=unit, delay=DELAY, file=sys.stderr, leave=False,
                ncols=size.columns or 80, nrows=size.lines or 24)
