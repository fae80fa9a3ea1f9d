"""The ``python -m agentlib`` command line.

Exit status: 0 when the command did what it was asked, 1 when it ran and something failed
(a turn of the demo), 2 for bad usage (argparse's own code; a closed standard output is
one), 130 when Ctrl-C stopped it, 141 when its output was closed before the end (a pipe to
``head``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__
from .._data._content import TextContentBlock
from .._data._convert import structure, unstructure
from .._data._entries import Entry, MessageEntry
from .._http._serve import check_port

PROG = "python -m agentlib"

#: Each command and what it does, in a line: the main help lists it, and the command's own
#: help opens with it.
COMMANDS = {
    "demo": "run an agent with three tools over three turns (offline, or on Mistral)",
    "selfcheck": "check that this installation works",
    "serve": "serve agents over HTTP (needs agentlib[server])",
}

DESCRIPTION = (
    "agentlib: a Python agent runtime on trio. Define an agent (a model, instructions,\n"
    "tools), start sessions with it and drive them by turns; `import agentlib_sync` for\n"
    "blocking calls, `import agentlib` for trio.\n\n"
    "commands:\n" + "\n".join(f"  {name:<11}{help}" for name, help in COMMANDS.items())
)

EPILOG = f"Start with `{PROG} demo`; `{PROG} <command> --help` says more."

#: What the demo's own help says after its line in COMMANDS.
DEMO_DETAILS = """\
The agent, "forecaster", looks up the weather in two cities with a tool, converts a
temperature with another, then emails a forecast with a third that needs your approval.
Each turn is printed as it runs: the user's message, the model's text as it streams, each
tool call with its result, the approval, and how the turn ended.

It runs offline on a scripted model; with MISTRAL_API_KEY set, on Mistral."""

DEMO_EPILOG = """\
environment:
  MISTRAL_API_KEY   run on Mistral's mistral-small-latest instead of the scripted model
  MISTRAL_BASE_URL  where Mistral's API is (default https://api.mistral.ai/v1)
  NO_COLOR          no colour (there is none either when the output is not a terminal)

exit status:
  0 every turn completed, 1 a turn did not (the demo stops there), 2 bad usage,
  130 interrupted (Ctrl-C), 141 the output was closed early (as by `| head`)"""

#: What selfcheck's own help says after its line in COMMANDS.
SELFCHECK_DETAILS = """\
A history entry goes to JSON and back unchanged, through agentlib's converter; the JSON
is printed."""


#: What serve's own help says after its line in COMMANDS.
SERVE_DETAILS = """\
AGENTS is module:attribute, e.g. myapp.agents:calculator: the attribute is an Agent, or a
list of agents (agentlib's or agentlib_sync's). The module is imported from the current
directory first. Sessions, turns and events are served as JSON under /v1; see the
"Deploying" guide."""

SERVE_EPILOG = """\
environment:
  AGENTLIB_TOKENS   tokens, separated by commas (safer than --token, which other users
                    of the machine can read in the process list)

exit status:
  0 stopped, 1 the server failed, 2 bad usage (AGENTS names no agent, --store names no
  store or one that cannot be opened), 130 Ctrl-C"""


def _command(
    commands: argparse._SubParsersAction[_CommandParser],
    name: str,
    details: str,
    epilog: str | None = None,
) -> argparse.ArgumentParser:
    """A command's parser: its description is its line in COMMANDS, as a sentence, then
    ``details``."""
    line = COMMANDS[name]
    return commands.add_parser(
        name,
        prog=f"{PROG} {name}",
        description=f"{line[0].upper()}{line[1:]}.\n\n{details}",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


class _CommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an argument it does not know is its own usage error.

    argparse leaves a subcommand's unknown arguments to the main parser, whose message
    shows the main usage; the subcommand's usage is the one that helps.
    """

    def parse_known_args(self, *args: Any, **kwargs: Any) -> Any:
        namespace, extra = super().parse_known_args(*args, **kwargs)
        if extra:
            self.error(f"unrecognized arguments: {' '.join(extra)}")
        return namespace, extra


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [-h] [--version] <command> [<args>]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"agentlib {__version__}",
        help="print agentlib's version and exit",
    )
    # The description lists the commands: argparse's own list misaligns names and help, so
    # it is hidden and the commands have no help= for it.
    commands = parser.add_subparsers(
        dest="command", metavar="<command>", help=argparse.SUPPRESS, parser_class=_CommandParser
    )
    demo = _command(commands, "demo", DEMO_DETAILS, DEMO_EPILOG)
    demo.add_argument(
        "--interactive",
        action="store_true",
        help="ask you at the terminal for the approval the third turn needs "
        "(y allows, anything else or Ctrl-D denies)",
    )
    _command(commands, "selfcheck", SELFCHECK_DETAILS)
    serve = _command(commands, "serve", SERVE_DETAILS, SERVE_EPILOG)
    serve.add_argument("agents", metavar="AGENTS", help="module:attribute naming the agents")
    serve.add_argument(
        "--store",
        help="where sessions live: sqlite:///path.db, or postgresql://host/database shared "
        "by several servers (needs agentlib[postgres]); default: in memory",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    serve.add_argument("--port", type=_port, default=8000, help="port to listen on (8000)")
    serve.add_argument(
        "--token",
        action="append",
        default=[],
        help="accept requests bearing this token (repeat for more); none: no check",
    )
    serve.add_argument(
        "--event-retention",
        type=_positive(int),
        metavar="N",
        help="keep only the last N events of each session (default: all)",
    )
    serve.add_argument(
        "--lease-seconds",
        type=_positive(float),
        metavar="S",
        help="how long this server holds a session after it stops renewing "
        "(the store's default: 30, or 10 on PostgreSQL)",
    )
    serve.set_defaults(parser=serve)  # its usage errors show its usage
    return parser


def _port(text: str) -> int:
    """An argument type: a port number."""
    try:
        port = int(text)
        check_port(port)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a port: give a whole number from 0 to 65535 (0 picks a free one)"
        ) from None
    return port


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argument type: a number of ``kind`` above zero."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            number = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {number}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"it must be above 0, not {text}")
        return value

    parse.__name__ = kind.__name__
    return parse


def _selfcheck() -> int:
    entry = MessageEntry(id="selfcheck", role="user", content=(TextContentBlock(text="hello"),))
    wire = json.dumps(unstructure(entry))
    assert structure(json.loads(wire), Entry) == entry
    print(f"agentlib {__version__}: data model round trip ok: {wire}")
    return 0


def run() -> None:
    """The ``agentlib`` command."""
    sys.exit(main())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (argparse exits with 2 itself)."""
    if sys.stdout is None:
        # Closed before the start (``>&-``). Every command writes there, help and version
        # included, which argparse would otherwise send to stderr with status 0.
        if sys.stderr is not None:
            print(f"{PROG}: error: standard output is closed", file=sys.stderr)
        return 2
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from ._demo import main as demo

        return demo(interactive=args.interactive)
    if args.command == "selfcheck":
        return _selfcheck()
    if args.command == "serve":
        from .._http._command import serve

        return serve(args.parser, args)
    # No command: a usage error, with the help that lists the commands.
    parser.print_help(sys.stderr)
    return 2
