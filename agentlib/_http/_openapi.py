"""The OpenAPI 3.1 description of the server's HTTP API, made from its route table.

The server's routes are :class:`Operation` values; ``Server.app()`` routes requests by
them and :func:`describe_api` describes them, so the two cannot drift. A body's schema is
made from its class (``_bodies``) with :mod:`agentlib._toolkit._schema`, a field's own ``schema``
metadata taking the place of its type's where it says more. Records, events, callbacks,
content blocks and history items are unions tagged by ``type``: each is described as an
object with a ``type`` string, whose description lists the tags (the guides and the
converter's own checks say the rest), since the whole union's schema would be unwieldy.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import attrs

from .._data._convert import FAMILIES
from .._toolkit._schema import Definitions

__all__ = [
    "CALLBACK_ANSWER",
    "ERROR",
    "EVENTS_PAGE",
    "RECORD",
    "SESSION_REF",
    "TURN_CONFLICT",
    "Operation",
    "Parameter",
    "describe_api",
    "object_schema",
    "string_schema",
    "tagged",
]

#: The version of the API the description gives.
API_VERSION = "1"


@attrs.frozen(kw_only=True)
class Parameter:
    """A query or header parameter of an operation."""

    name: str
    where: str = "query"
    schema: Mapping[str, Any] = attrs.field(factory=dict)
    description: str = ""


@attrs.frozen(kw_only=True)
class Operation:
    """One route of the server: what it takes, what it answers, who may call it.

    Attributes:
        method: The HTTP method.
        path: The path, with ``{name}`` for each path parameter.
        endpoint: What answers it: ``endpoint(server, request)``.
        name: Its name in the description (its ``operationId``).
        summary: What it does, in a line.
        body: The class its JSON body is read into, if it takes one.
        answers: The schema of each success status's JSON body.
        conflict: The schema of its 409 body, where it is not an error's.
        parameters: Its query and header parameters.
        streams: Whether it also answers Server-Sent Events (``text/event-stream``).
        token: Whether a server with tokens wants one.
        right: The right a session-scoped token needs for it (None: none is enough).
    """

    method: str
    path: str
    endpoint: Callable[..., Awaitable[Any]]
    name: str
    summary: str
    body: type[Any] | None = None
    answers: Mapping[int, Mapping[str, Any]]
    conflict: Mapping[str, Any] | None = None
    parameters: tuple[Parameter, ...] = ()
    streams: bool = False
    token: bool = True
    right: str | None = None

    def statuses(self) -> tuple[int, ...]:
        """The error statuses it can answer."""
        found = set()
        if self.token:
            found |= {401, 403}
        if self.body is not None or self.parameters:
            found.add(400)
        if self.body is not None:
            found.add(413)
        if "{agent}" in self.path:  # the runtime's: its store may be out of reach
            found |= {404, 503}
        if self.method == "POST" and "{agent}" in self.path:  # a key used for another body
            found.add(422)
        if "{session_id}" in self.path:
            # A malformed id or cursor; a session another runtime holds, or that was
            # cancelled; events pruned; a procedure the session does not take.
            found |= {400, 409, 410}
        if self.method == "POST" and "{session_id}" in self.path:
            found.add(405)
        return tuple(sorted(found - set(self.answers)))


def tagged(family: str, what: str, *, known_only: bool = False) -> dict[str, Any]:
    """The schema of a member of the converter's ``family``: an object with a ``type`` of
    the family's tags, or another for a family that keeps unknown members (unless
    ``known_only``: input that takes no unknown member)."""
    known = FAMILIES[family]
    tags = ", ".join(map(repr, known.by_tag))
    kind: dict[str, Any] = {"type": "string", "description": f"{what}'s type: {tags}"}
    if known_only or known.unknown is None:
        kind["enum"] = list(known.by_tag)
    return {
        "type": "object",
        "description": what,
        "required": ["type"],
        "properties": {"type": kind},
    }


def string_schema(description: str = "") -> dict[str, Any]:
    """The schema of a string, with its ``description``."""
    return {"type": "string", "description": description} if description else {"type": "string"}


def object_schema(**properties: Any) -> dict[str, Any]:
    """The schema of an object that has each of ``properties`` (and perhaps more)."""
    return {"type": "object", "required": sorted(properties), "properties": properties}


#: A turn's record.
RECORD = tagged("record", "a turn's record")
#: What became of a callback's answer.
CALLBACK_ANSWER: dict[str, Any] = {
    "type": "object",
    "required": ["type"],
    "description": "what became of the answer",
    "properties": {"type": {"enum": ["answered", "already_settled", "not_found", "not_reported"]}},
}
#: Why a turn took no steer or interrupt.
TURN_CONFLICT: dict[str, Any] = {
    "type": "object",
    "required": ["type"],
    "description": "why the turn took no steer or interrupt (it is no longer active, say)",
    "properties": {"type": {"const": "turn_conflict"}},
}
#: A session, named by its id and its agent's name.
SESSION_REF = object_schema(
    id=string_schema("the session's id"), agent=string_schema("the agent's name")
)
#: A page of events.
EVENTS_PAGE: dict[str, Any] = {
    "type": "object",
    "required": ["events", "cursor", "ended"],
    "properties": {
        "events": {"type": "array", "items": tagged("event", "an event")},
        "cursor": {"type": ["string", "null"], "description": "the next page's after"},
        "ended": {"type": "boolean", "description": "whether no more events will come"},
    },
}

#: An error's body: its class, its message and the attributes a caller acts on.
ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["type", "message"],
            "properties": {
                "type": {"type": "string", "description": "the error's class"},
                "message": {"type": "string"},
                "errors": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "a ValidationError's problems, each with its path",
                },
                "cursor": {
                    "type": ["string", "null"],
                    "description": "an ObservationLost's cursor to resume after",
                },
                "status": {"description": "a ModelError's status from the model"},
                "code": {"description": "a ModelError's code from the model"},
                "turn_id": {"type": "string", "description": "a Busy session's running turn"},
            },
        }
    },
}

_REASONS = {
    400: "the request is malformed: its body, a parameter, an id or a cursor",
    401: "no token, or one this server does not take",
    403: "a session-scoped token on a route its rights do not cover",
    404: "no such agent, session, turn or callback (or another principal's)",
    405: "the session does not take this procedure",
    409: "the session is busy, cancelled, or held by another runtime",
    410: "the events after the cursor were pruned",
    413: "the body is larger than the server takes",
    422: "an idempotency key used for another request, or an answer the callback refuses",
    503: "the store cannot be reached, or the session's lease was lost",
}

_PATH_PARAMETER = re.compile(r"\{(\w+)\}")


def describe_api(operations: tuple[Operation, ...]) -> dict[str, Any]:
    """The OpenAPI 3.1 document of ``operations``."""
    definitions = Definitions()
    paths: dict[str, dict[str, Any]] = {}
    for operation in operations:
        paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(
            operation, definitions
        )
    components: dict[str, Any] = {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {"Error": ERROR, **definitions.defs},
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "agentlib",
            "version": API_VERSION,
            "description": "A runtime's agents, their sessions, turns, callbacks and events.",
        },
        "paths": paths,
        "components": components,
    }


def _operation(operation: Operation, definitions: Definitions) -> dict[str, Any]:
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in _PATH_PARAMETER.findall(operation.path)
    ]
    for parameter in operation.parameters:
        described: dict[str, Any] = {
            "name": parameter.name,
            "in": parameter.where,
            "required": False,
            "schema": dict(parameter.schema),
        }
        if parameter.description:
            described["description"] = parameter.description
        parameters.append(described)
    described = {"operationId": operation.name, "summary": operation.summary}
    if parameters:
        described["parameters"] = parameters
    if operation.body is not None:
        fields = attrs.fields(operation.body)
        described["requestBody"] = {
            "required": any(field.default is attrs.NOTHING for field in fields),
            "content": {"application/json": {"schema": body_schema(operation.body, definitions)}},
        }
    responses: dict[str, Any] = {}
    for status, schema in sorted(operation.answers.items()):
        content: dict[str, Any] = {"application/json": {"schema": dict(schema)}}
        if operation.streams:
            content["text/event-stream"] = {
                "schema": {
                    "type": "string",
                    "description": "each frame's id is the event's cursor, event its type, "
                    "data its JSON; an 'end' event closes a stream that was not cut",
                }
            }
        responses[str(status)] = {"description": "done", "content": content}
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for status in operation.statuses():
        conflict = operation.conflict if status == 409 else None
        if conflict is not None:
            either = {"oneOf": [{"$ref": "#/components/schemas/Error"}, dict(conflict)]}
            content = {"application/json": {"schema": either}}
        else:
            content = error
        responses[str(status)] = {"description": _REASONS[status], "content": content}
    described["responses"] = responses
    described["security"] = [{"bearer": []}] if operation.token else []
    return described


def body_schema(cls: type[Any], definitions: Definitions) -> dict[str, Any]:
    """The schema of a body of class ``cls``: each field's own ``schema`` metadata, or its
    type's, with its ``description``."""
    schema = definitions.schema(cls)
    for field in attrs.fields(cls):
        described = dict(field.metadata.get("schema") or schema["properties"][field.name])
        if "description" in field.metadata:
            described["description"] = field.metadata["description"]
        schema["properties"][field.name] = described
    return schema
