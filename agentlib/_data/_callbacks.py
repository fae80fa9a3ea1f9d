"""Callbacks a turn waits on, and the answers that settle them."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Union

import attrs

from ._json import InvalidValue, json_field, known_tag_refused, raw_field

__all__ = [
    "AllowApproval",
    "ApprovalAnswer",
    "Callback",
    "Credentials",
    "DenyApproval",
    "KeepCallbackOpen",
    "OpenApproval",
    "OpenClientToolCall",
    "OpenSignIn",
    "SignInAnswer",
    "UnknownCallback",
]


@attrs.frozen(kw_only=True)
class OpenApproval:
    """A tool call waiting for the client's approval.

    Answer with :class:`AllowApproval` or :class:`DenyApproval`.

    Attributes:
        id: The callback's id (a UUID).
        session_id: The session that opened it (a subagent's, for a subagent's call).
        turn_id: The turn that waits on it.
        tool_name: The tool's full id.
        arguments: The arguments the tool would run with.
        source: ``"tool"`` when the tool requires approval, ``"hook"`` when a
            ``pre_tool_call`` hook asked for it.
    """

    type: ClassVar[str] = "approval"
    id: str
    session_id: str
    turn_id: str
    tool_name: str
    arguments: Any = json_field()
    source: Literal["tool", "hook"] = "tool"
    reason: str | None = None


@attrs.frozen(kw_only=True)
class OpenClientToolCall:
    """A call of a client tool: the client runs it and answers with its result.

    Attributes:
        id: The callback's id (a UUID).
        session_id: The session that opened it.
        turn_id: The turn that waits on it.
        tool_name: The tool's full id, ``"client.<name>"``.
        arguments: The call's arguments.
    """

    type: ClassVar[str] = "client_tool_call"
    id: str
    session_id: str
    turn_id: str
    tool_name: str
    arguments: Any = json_field()


def _frozen_mapping(value: Mapping[str, str]) -> Mapping[str, str]:
    return MappingProxyType(dict(value))


@attrs.frozen(kw_only=True)
class OpenSignIn:
    """Tool sources that need credentials before their tools can run.

    Answer with a :class:`SignInAnswer` naming every source in ``sources`` and only those.

    Attributes:
        id: The callback's id (a UUID).
        session_id: The session that opened it.
        turn_id: The turn that waits on it.
        sources: The names of the tool sources to sign in to.
        authorization_urls: For a source that signs in with OAuth (an MCP server's), the
            address the user opens to sign in, by source name. The authorization server
            then redirects the browser; the answer's credential for the source is the
            address it redirected to (or its query string). The URL holds no secret: its
            PKCE verifier stays in the runtime.
    """

    type: ClassVar[str] = "sign_in"
    id: str
    session_id: str
    turn_id: str
    sources: tuple[str, ...] = attrs.field(converter=tuple)
    authorization_urls: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_mapping, repr=lambda urls: repr(dict(urls)), hash=False
    )


@attrs.frozen(kw_only=True)
class UnknownCallback:
    """A callback of a type added after this version of agentlib.

    Attributes:
        id: The callback's id.
        session_id: The session that opened it.
        turn_id: The turn that waits on it.
        callback_type: Its type as received.
        raw: Its other fields as received (all but type, ids and cursor); re-emitted unchanged.
    """

    id: str
    session_id: str
    turn_id: str
    callback_type: str = attrs.field(validator=known_tag_refused(lambda: Callback, "callback"))
    raw: Mapping[str, Any] = raw_field("id", "session_id", "turn_id")


Callback = Union[OpenApproval, OpenClientToolCall, OpenSignIn, UnknownCallback]
"""A callback a turn waits on, as listed in ``Blocked.callbacks``: match it by class."""


@attrs.frozen(kw_only=True)
class AllowApproval:
    """Run the tool call.

    Attributes:
        scope: ``"once"`` for this call only; ``"session"`` for every call of this tool for
            the rest of the session (refused for an approval a hook asked for).
    """

    type: ClassVar[str] = "allow"
    scope: Literal["once", "session"] = attrs.field(default="once")

    @scope.validator
    def _check_scope(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if value not in ("once", "session"):  # an answer is stored: it must have a JSON form
            raise InvalidValue('scope must be "once" or "session"')


@attrs.frozen(kw_only=True)
class DenyApproval:
    """Refuse the tool call; the model gets the refusal as the tool's error result.

    Attributes:
        reason: Why, for the model; None gives a generic refusal.
    """

    type: ClassVar[str] = "deny"
    reason: str | None = attrs.field(default=None)

    @reason.validator
    def _check_reason(self, attribute: attrs.Attribute[Any], value: object) -> None:
        if value is not None and not isinstance(value, str):  # the model reads it as text
            raise InvalidValue(f"reason must be a string or None, not {type(value).__name__}")


ApprovalAnswer = Union[AllowApproval, DenyApproval]
"""What answers an ``OpenApproval``: ``AllowApproval`` or ``DenyApproval``."""


def _freeze_credentials(value: object) -> Mapping[str, str]:
    if isinstance(value, Mapping):
        return MappingProxyType(dict(value))
    return value  # type: ignore[return-value]  # the validator says what is wrong


def _check_credentials(
    instance: object, attribute: attrs.Attribute[Any], value: Mapping[str, str]
) -> None:
    if not isinstance(value, Mapping):
        raise InvalidValue(
            f"credentials must be a dict of source name to credential, not {type(value).__name__}"
        )
    for source, secret in value.items():
        if not isinstance(source, str) or not source:
            raise InvalidValue("every credentials key must be a tool source's name")
        if not isinstance(secret, str):
            raise InvalidValue(
                f"the credential for {source!r} must be a string, not {type(secret).__name__}"
            )


def _redacted(credentials: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{source!r}: '***'" for source in credentials) + "}"


@attrs.frozen(kw_only=True)
class SignInAnswer:
    """Credentials for the tool sources an :class:`OpenSignIn` named.

    The credentials never appear in a ``repr`` or an error message.

    Attributes:
        credentials: Each requested source's credential, by source name.
    """

    type: ClassVar[str] = "sign_in"
    credentials: Mapping[str, str] = attrs.field(
        converter=_freeze_credentials, validator=_check_credentials, repr=_redacted
    )


@attrs.frozen
class KeepCallbackOpen:
    """A handler's way to leave its callback open for someone else to answer.

    It is a handler's return value, never an answer: ``turn.answer`` refuses it.
    """

    type: ClassVar[str] = "keep_open"


@attrs.frozen(kw_only=True)
class Credentials:
    """A tool source's credentials, given to tools through ``Annotated[Credentials, Depends()]``.

    Attributes:
        source: The tool source's name.
        value: The credential; it never appears in a ``repr``.
    """

    source: str
    value: str = attrs.field(repr=lambda _: "'***'")
