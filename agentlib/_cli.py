"""The ``python -m agentlib`` command line."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from . import __version__
from ._content import TextContentBlock
from ._convert import structure, unstructure
from ._entries import Entry, MessageEntry


def _selfcheck() -> int:
    entry = MessageEntry(id="selfcheck", role="user", content=(TextContentBlock(text="hello"),))
    wire = json.dumps(unstructure(entry))
    assert structure(json.loads(wire), Entry) == entry
    print(f"agentlib {__version__}: data model round trip ok: {wire}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m agentlib")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser(
        "demo", help="run a scripted agent: three tools, three turns, offline"
    )
    demo_parser.add_argument(
        "--interactive",
        action="store_true",
        help="ask at the terminal for the approval the third turn needs",
    )
    commands.add_parser("selfcheck", help="check that the data model works")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import main as demo

        return demo(interactive=args.interactive)
    if args.command == "selfcheck":
        return _selfcheck()
    return 2  # pragma: no cover  (argparse refuses unknown commands)
