"""``python -m agentlib_sync``: agentlib_sync has no command line; agentlib's runs the demo."""

from __future__ import annotations

import sys
from collections.abc import Sequence

MESSAGE = (
    "agentlib_sync has no command line: use `python -m agentlib` "
    "(`python -m agentlib demo` runs the demo)"
)


def main(argv: Sequence[str]) -> int:
    """Say where the command line is; returns the exit status (0 for --help, else 2)."""
    if list(argv) in (["-h"], ["--help"]):
        print(MESSAGE)
        return 0
    print(MESSAGE, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
