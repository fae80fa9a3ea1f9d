"""MCP servers an agent declares: where each is, which of its tools the model gets, and
which calls need an approval."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Literal, Union
from urllib.parse import urlsplit

import attrs

from ._oauth import MCPOAuth

__all__ = [
    "ElicitationHandler",
    "MCPServer",
    "RemoteMCP",
    "StdioMCP",
    "check_mcp_installed",
    "check_mcps",
    "redacted_url",
]

#: What ``pip`` installs for an MCP server, named in the error raised without it.
INSTALL_HINT = "pip install 'agentlib[mcp]'"


def check_mcp_installed() -> None:
    """Raises:
    ImportError: The ``mcp`` SDK is not installed; the message says how to install it."""
    if importlib.util.find_spec("mcp") is None:
        raise ImportError(
            f"MCP servers need the official MCP SDK: {INSTALL_HINT}",
            name="mcp",
        )


def _names(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(f"a list of tool names is expected, not {value!r}")
    names = tuple(value)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"tool names are strings, not {name!r}")
    return names


#: What answers a server's form elicitation: called with its message and the JSON schema of
#: what it asks; returns the content (a dict matching the schema), or None to decline.
ElicitationHandler = Callable[
    [str, Mapping[str, Any]],
    Union[Mapping[str, Any], Awaitable[Union[Mapping[str, Any], None]], None],
]


def _handler(value: object) -> ElicitationHandler | None:
    if value is not None and not callable(value):
        raise TypeError(
            "elicitation_handler is a function of the message and the schema, not "
            + type(value).__name__
        )
    return value


def _oauth(value: object) -> MCPOAuth | None:
    if value is True:
        return MCPOAuth()
    if value is not None and not isinstance(value, MCPOAuth):
        raise TypeError(f"oauth is an MCPOAuth(...) or None, not {type(value).__name__}")
    return value


def _denied(value: object) -> tuple[str, ...]:
    return _names(value) or ()


def _approval(value: object) -> bool | Literal["destructive"] | tuple[str, ...]:
    if isinstance(value, bool):
        return value
    if value == "destructive":
        return "destructive"
    if isinstance(value, str):
        raise ValueError(
            f'requires_approval is True, False, "destructive" or a list of tool names, '
            f"not {value!r}"
        )
    names = _names(value)
    assert names is not None
    return names


def _headers(value: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return _pairs(value, "headers")


def _env_vars(value: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return _pairs(value, "auth_header_env_vars")


def _env(value: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    return _pairs(value, "env")


def _cwd(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


def _pairs(value: Mapping[str, str] | None, what: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} is a mapping of names to strings, not {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(f"{what} maps names to strings; {key!r} does not")
    return tuple(sorted(value.items()))


@attrs.frozen(kw_only=True)
class _Filters:
    """What both kinds of server share: tool filters, approvals, the connection's deadline."""

    allow: tuple[str, ...] | None = attrs.field(default=None, converter=_names)
    deny: tuple[str, ...] = attrs.field(default=(), converter=_denied)
    requires_approval: bool | Literal["destructive"] | tuple[str, ...] = attrs.field(
        default=False, converter=_approval
    )
    connect_timeout: float = 30.0
    elicitation_handler: ElicitationHandler | None = attrs.field(
        default=None, converter=_handler, repr=False
    )

    def __attrs_post_init__(self) -> None:
        check_mcp_installed()
        timeout = self.connect_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
            raise ValueError(f"connect_timeout is a positive number of seconds, not {timeout!r}")

    def offers(self, tool: str) -> bool:
        """Whether the model gets the server's tool named ``tool``."""
        return (self.allow is None or tool in self.allow) and tool not in self.deny

    def needs_approval(self, tool: str, *, destructive: bool) -> bool:
        """Whether a call of ``tool`` opens an approval first; ``destructive`` is what the
        server's annotations say of it."""
        rule = self.requires_approval
        if rule == "destructive":
            return destructive
        if isinstance(rule, bool):
            return rule
        return tool in rule


@attrs.frozen(kw_only=True)
class RemoteMCP(_Filters):
    """An MCP server reached over streamable HTTP.

    Attributes:
        url: The server's MCP endpoint, e.g. ``"https://example.com/mcp"``.
        headers: Headers sent with every request.
        auth_header_env_vars: Headers whose values are read from environment variables
            when the connection opens (``{"Authorization": "GITHUB_TOKEN"}``); the values
            are never stored, shown or logged.
        allow: The only tools the model gets (by the server's names); None: all.
        deny: Tools the model never gets.
        requires_approval: Which calls open an approval first: ``True`` (all), ``False``
            (none), a list of tool names, or ``"destructive"``: the tools the server does
            not annotate as read-only or non-destructive (MCP's ``destructiveHint``
            defaults to true).
        connect_timeout: How long, in seconds, the server has to connect and list its
            tools; past it, it is unavailable for the turn.
        oauth: How a session signs in to the server when it asks for OAuth (a 401 with
            its resource metadata): an :class:`MCPOAuth`, or ``True`` for the defaults.
            Each session then has a connection of its own, and signs in through an
            ``OpenSignIn``; None: the server's 401 leaves it unavailable.
        elicitation_handler: What answers the server's form elicitations during a call:
            ``handler(message, schema)``, sync or async, returns the content or None to
            decline. Without one, they are declined.

    Raises:
        ImportError: The ``mcp`` extra is not installed (``pip install 'agentlib[mcp]'``).
        ValueError: ``url`` is not an HTTP address, or an option has no valid value.
    """

    url: str
    headers: tuple[tuple[str, str], ...] = attrs.field(default=None, converter=_headers, repr=False)
    auth_header_env_vars: tuple[tuple[str, str], ...] = attrs.field(
        default=None, converter=_env_vars
    )
    oauth: MCPOAuth | None = attrs.field(default=None, converter=_oauth)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        parts = urlsplit(self.url) if isinstance(self.url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                "url is the server's HTTP address, e.g. 'https://example.com/mcp', not "
                f"{redacted_url(self.url) if isinstance(self.url, str) else self.url!r}"
            )

    def __repr__(self) -> str:
        headers = ", ".join(name for name, _ in self.headers)
        env = ", ".join(f"{name}={var}" for name, var in self.auth_header_env_vars)
        oauth = "" if self.oauth is None else f", oauth={self.oauth!r}"
        return f"RemoteMCP(url={redacted_url(self.url)!r}, headers=[{headers}], env=[{env}]{oauth})"

    def request_headers(self) -> dict[str, str]:
        """The headers to send, with the values of ``auth_header_env_vars`` read now.

        Raises:
            ValueError: A named environment variable is not set (the message names the
                variable, never a value).
        """
        headers = dict(self.headers)
        for name, variable in self.auth_header_env_vars:
            value = os.environ.get(variable)
            if not value:
                raise ValueError(
                    f"the environment variable {variable} (for the {name} header) is not set"
                )
            headers[name] = value
        return headers

    def secrets(self) -> list[str]:
        """Values that no message may show: the headers' and the named variables'."""
        found = [value for _, value in self.headers]
        found += [os.environ.get(variable, "") for _, variable in self.auth_header_env_vars]
        return [value for value in found if len(value) >= 4]


def _command(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError(
            "command is a list: the program and its arguments, e.g. ['uvx', 'mcp-server-time']"
        )
    items = list(value)
    if not items or not all(isinstance(item, str) and item for item in items):
        raise ValueError("command is the program and its arguments, as non-empty strings")
    return tuple(items)


@attrs.frozen(kw_only=True)
class StdioMCP(_Filters):
    """An MCP server run as a process of this one, spoken to over its stdin and stdout.

    The process starts when a session first needs the server, and is stopped (and waited
    for) when the runtime closes.

    Attributes:
        command: The program and its arguments, e.g. ``["uvx", "mcp-server-time"]``.
        env: Environment variables set for the process, over this process's
            (the SDK passes on a safe few: ``HOME``, ``PATH``...).
        cwd: The process's working directory.
        allow: The only tools the model gets (by the server's names); None: all.
        deny: Tools the model never gets.
        requires_approval: ``True``, ``False``, a list of tool names, or
            ``"destructive"`` (see :class:`RemoteMCP`).
        connect_timeout: How long, in seconds, the server has to start and list its
            tools; past it, it is unavailable for the turn.
        elicitation_handler: What answers the server's form elicitations
            (see :class:`RemoteMCP`).

    Raises:
        ImportError: The ``mcp`` extra is not installed (``pip install 'agentlib[mcp]'``).
        ValueError: ``command`` is empty, or an option has no valid value.
    """

    command: tuple[str, ...] = attrs.field(converter=_command)
    env: tuple[tuple[str, str], ...] = attrs.field(default=None, converter=_env, repr=False)
    cwd: str | None = attrs.field(default=None, converter=_cwd)

    def __repr__(self) -> str:
        names = ", ".join(name for name, _ in self.env)
        return f"StdioMCP(command={list(self.command)!r}, env=[{names}])"

    def secrets(self) -> list[str]:
        """Values that no message may show: those of ``env``."""
        return [value for _, value in self.env if len(value) >= 4]


MCPServer = Union[RemoteMCP, StdioMCP]
"""An MCP server an agent declares."""


def redacted_url(url: str) -> str:
    """``url`` without what may be a credential: a user name, a password, the query."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<an address that is not a URL>"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def check_mcps(agent: str, mcps: Mapping[str, Any] | None) -> dict[str, MCPServer]:
    """The MCP servers of agent ``agent``, by name.

    Raises:
        TypeError: A value is not a :class:`RemoteMCP` or :class:`StdioMCP`.
        ValueError: A name is not an identifier, or is ``"client"``.
    """
    if not mcps:
        return {}
    if not isinstance(mcps, Mapping):
        raise TypeError(
            f"agent {agent!r}: mcps maps names to servers, e.g. "
            "{'github': RemoteMCP(url=...)}; not " + type(mcps).__name__
        )
    servers: dict[str, MCPServer] = {}
    for name, server in mcps.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(
                f"agent {agent!r}: MCP server name {name!r} must be letters, digits and "
                "underscores (its tools are named '<server>.<tool>')"
            )
        if name == "client":
            raise ValueError(f'agent {agent!r}: "client" names client tools; rename the server')
        if not isinstance(server, (RemoteMCP, StdioMCP)):
            raise TypeError(
                f"agent {agent!r}: MCP server {name!r} is a RemoteMCP(url=...) or a "
                f"StdioMCP(command=[...]), not {type(server).__name__}"
            )
        servers[name] = server
    return servers
