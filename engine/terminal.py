"""The command line's consoles, configured once.

Every ``engine`` command prints through :func:`terminal_console`:

* user data is never read as markup (an item ``[/x]``, a persistence id ``[/pid]``
  or a path with brackets prints as it is) and no ``:emoji:`` codes are replaced;
* nothing is hard-wrapped: a long path or number stays on one line, so output
  piped into ``grep``/``cut`` has whole lines;
* when the output is not a terminal, tables get all the width they need (no cell
  is truncated with an ellipsis).
"""

from __future__ import annotations

import sys

from rich.console import Console

#: The width tables may take when the output is a pipe or a file.
_PIPE_WIDTH = 4096


def terminal_console(*, stderr: bool = False) -> Console:
    """A console for standard output (or standard error) with the rules above."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else _PIPE_WIDTH
    return Console(
        stderr=stderr, highlight=False, markup=False, emoji=False, soft_wrap=True, width=width
    )
