"""TestModel: calls every tool it is offered once, with arguments made from their JSON
schemas, then answers; and the values it makes from a schema."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from .._data._convert import unstructure
from .._data._entries import ToolResultEntry
from .._data._errors import ModelError
from .._data._json import json_problem
from ._base import ModelReply, ModelRequest, TextSink, ToolCallRequest

__all__ = ["TestModel", "value_for_schema"]

#: Below this depth, optional properties, one item per array and the first option of a union
#: that is not null are made; from it on, only what the schema requires, so that a schema
#: that refers to itself (a tree) still ends.
_SHALLOW = 6
#: A schema that requires itself without end gets None here.
_DEEPEST = 40
#: A valid value for each string format a schema may name.
_FORMATS = {
    "date-time": "2000-01-01T00:00:00Z",
    "date": "2000-01-01",
    "time": "00:00:00",
    "duration": "P1D",
    "email": "user@example.com",
    "hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "uuid": "00000000-0000-4000-8000-000000000000",
}
#: Keywords that only describe a schema: one made of these and a default takes its default.
_NOTES = frozenset({"title", "description", "default", "examples", "deprecated"})


def value_for_schema(schema: Mapping[str, Any], *, seed: int = 0) -> Any:
    """A value that ``schema`` accepts, made by :class:`TestModel`'s rules.

    Raises:
        ModelError: A ``$ref`` names nothing in the schema.
    """
    return _Values(schema, seed).of(schema, 0)


class _Values:
    def __init__(self, root: Mapping[str, Any], seed: int) -> None:
        self.root = root
        self.count = seed
        # The schemas around the current one that hold definitions, innermost last: a
        # pydantic model's schema inside a tool's keeps its $defs, and its refs, to itself.
        self.scopes: list[Mapping[str, Any]] = []

    def next(self) -> int:
        number = self.count
        self.count += 1
        return number

    def of(self, schema: object, depth: int) -> Any:
        if isinstance(schema, Mapping) and ("$defs" in schema or "definitions" in schema):
            self.scopes.append(schema)
            try:
                return self.made(schema, depth)
            finally:
                self.scopes.pop()
        return self.made(schema, depth)

    def made(self, schema: object, depth: int) -> Any:
        if not isinstance(schema, Mapping):  # the schemas true and false
            return self.string({})
        if depth >= _DEEPEST:
            return None
        ref = schema.get("$ref")
        if isinstance(ref, str):
            rest = {key: value for key, value in schema.items() if key != "$ref"}
            return self.of({**self.resolve(ref), **rest}, depth + 1)
        if "const" in schema:
            return schema["const"]
        members = schema.get("enum")
        if isinstance(members, Sequence) and not isinstance(members, str) and members:
            return members[self.next() % len(members)]
        if "default" in schema and set(schema) <= _NOTES:
            return schema["default"]
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, Sequence) and options:
                rest = {name: value for name, value in schema.items() if name != key}
                return self.of({**rest, **self.option(options, depth)}, depth + 1)
        parts = schema.get("allOf")
        if isinstance(parts, Sequence) and parts:
            merged = {key: value for key, value in schema.items() if key != "allOf"}
            for part in parts:
                if isinstance(part, Mapping):
                    if isinstance(part.get("$ref"), str):
                        part = {**self.resolve(part["$ref"]), **part}
                        del part["$ref"]
                    merged.update(part)
            return self.of(merged, depth + 1)
        kind = self.kind(schema)
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, depth)
        if kind == "integer":
            return self.integer(schema)
        if kind == "number":
            return self.number(schema)
        if kind == "boolean":
            return self.next() % 2 == 0
        if kind == "null":
            return None
        return self.string(schema)

    def resolve(self, ref: str) -> Mapping[str, Any]:
        if ref.startswith("#"):
            for scope in (*reversed(self.scopes), self.root):
                found: object = scope
                for part in ref[1:].split("/"):
                    if part:
                        part = part.replace("~1", "/").replace("~0", "~")
                        found = found.get(part) if isinstance(found, Mapping) else None
                if isinstance(found, Mapping):
                    return found
        raise ModelError(
            f"the schema refers to {ref!r}, which names nothing in it: give the "
            "definition in the schema's $defs"
        )

    def option(self, options: Sequence[Any], depth: int) -> Mapping[str, Any]:
        def is_null(option: object) -> bool:
            return isinstance(option, Mapping) and option.get("type") == "null"

        chosen = [option for option in options if not is_null(option)]
        if depth >= _SHALLOW:
            chosen = [option for option in options if is_null(option)] or chosen
        first = (chosen or list(options))[0]
        return first if isinstance(first, Mapping) else {}

    def kind(self, schema: Mapping[str, Any]) -> str:
        kind = schema.get("type")
        if isinstance(kind, Sequence) and not isinstance(kind, str):
            kinds = [str(name) for name in kind]
            kind = next((name for name in kinds if name != "null"), kinds[0] if kinds else None)
        if isinstance(kind, str):
            return kind
        if any(key in schema for key in ("properties", "additionalProperties", "required")):
            return "object"
        if any(key in schema for key in ("items", "prefixItems")):
            return "array"
        return "string"

    def object(self, schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, Mapping) else {}
        required = schema.get("required")
        required = [name for name in required if isinstance(name, str)] if required else []
        value: dict[str, Any] = {}
        for name, sub in properties.items():
            if name in required or depth < _SHALLOW:
                value[name] = self.of(sub, depth + 1)
        for name in required:
            if name not in value:
                value[name] = self.of({}, depth + 1)
        extra = schema.get("additionalProperties")
        if not properties and isinstance(extra, Mapping) and depth < _SHALLOW:
            value[self.string({})] = self.of(extra, depth + 1)
        return value

    def array(self, schema: Mapping[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if isinstance(items, Sequence) and not isinstance(items, str):  # a tuple, draft 4
            prefix, items = items, schema.get("additionalItems")
        value = [self.of(sub, depth + 1) for sub in prefix or ()]
        least = _bound(schema.get("minItems"))
        most = _bound(schema.get("maxItems"))
        wanted = max(least or 0, 0 if depth >= _SHALLOW else 1)
        if most is not None:
            wanted = min(wanted, most)
        while len(value) < wanted and items is not False:
            value.append(self.of(items if items is not None else {}, depth + 1))
        return value

    def integer(self, schema: Mapping[str, Any]) -> int:
        low, high = _range(schema, step=1)
        value = self.next()
        if low is not None:
            value = max(value, math.ceil(low))
        if high is not None:
            value = min(value, math.floor(high))
        step = schema.get("multipleOf")
        if isinstance(step, int) and not isinstance(step, bool) and step > 0:
            value = -(-value // step) * step
            if high is not None and value > high:
                value -= step
        return value

    def number(self, schema: Mapping[str, Any]) -> float:
        low, high = _range(schema, step=0.5)
        value = self.next() + 0.5
        if low is not None and value < low:
            value = float(low)
        if high is not None and value > high:
            value = float(high) if low is None else (float(low) + float(high)) / 2
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
            value = math.ceil(value / step) * step
        return value

    def string(self, schema: Mapping[str, Any]) -> str:
        known = _FORMATS.get(str(schema.get("format")))
        if known is not None:
            return known
        number = self.next()
        letters = ""
        while True:
            letters = chr(ord("a") + number % 26) + letters
            number = number // 26 - 1
            if number < 0:
                break
        least = _bound(schema.get("minLength")) or 0
        while len(letters) < least:
            letters += letters
        most = _bound(schema.get("maxLength"))
        return letters[: max(least, most)] if most is not None else letters


def _bound(value: object) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def _number(value: object) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    return None


def _range(schema: Mapping[str, Any], *, step: float) -> tuple[float | None, float | None]:
    """The least and greatest values ``schema`` takes, an exclusive bound moved in by
    ``step`` (a boolean ``exclusiveMinimum`` is draft 4's)."""
    low, high = _number(schema.get("minimum")), _number(schema.get("maximum"))
    above, below = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if above is True and low is not None:
        low += step
    elif (bound := _number(above)) is not None:
        low = max(low if low is not None else -math.inf, bound + step)
    if below is True and high is not None:
        high -= step
    elif (bound := _number(below)) is not None:
        high = min(high if high is not None else math.inf, bound - step)
    return low, high


class TestModel:
    """A model for tests that calls tools, offline: its first step of a turn calls every tool
    the request offers, once each, with arguments made from the tool's JSON schema; the
    next step answers.

    The answer is a JSON object of the turn's tool results by tool id (``{}`` when no tool
    was called): a result's JSON value if the tool returned one, else its text, and
    ``{"error": <text>}`` for a call that failed. An agent with an output type gets instead
    a JSON value made from the output type's schema, which the turn parses into it.

    Values are made the same for the same schema and seed, each taking the next number from
    ``seed`` on: strings ``"a"``, ``"b"``..., integers ``seed``, ``seed + 1``..., numbers
    the same plus 0.5, booleans True and False in turn, and an enum's members in turn,
    within the schema's bounds and lengths (a ``pattern`` is not followed). Every property of
    an object is given, required or not; an array has one item (or its ``minItems``); a
    union takes its first option that is not null; ``$ref`` is looked up in the schema, and
    a schema that refers to itself ends where its optional parts allow.

    Subagents and client tools are tools of the request too: they are called like the others
    (a client tool's call then waits for the client's answer, and one that requires approval
    for the approval). The model keeps no state between steps but :attr:`requests`: a step
    tells from the request's history whether its turn's tools have run. One object may serve
    many agents, sessions and runtimes.

    Args:
        call_tools: ``"all"``, or the ids of the tools to call (``["add",
            "client.pick"]``); tools of the request not named are not called, and names
            the request does not offer are passed over.
        custom_output_text: The answer's text, as it is, instead of the results.
        custom_output_args: The answer as a value (a dict, a list, an attrs class or
            dataclass instance...), sent as its JSON, instead of the results or a value made
            from the output type's schema; None makes one.
        seed: Where the numbers of the generated values start; another seed gives other
            strings, numbers and enum members.

    Attributes:
        requests: Each request the model received, oldest first: what the engine sent
            (history, tools, output schema) for a test to check.

    Raises:
        ValueError: ``call_tools`` is neither ``"all"`` nor a list of names, both outputs are
            given, ``custom_output_text`` is not a str, ``custom_output_args`` has no JSON
            form, or ``seed`` is not an int.
    """

    __test__ = False  # not a test class, whatever its name tells pytest

    def __init__(
        self,
        *,
        call_tools: Literal["all"] | Iterable[str] = "all",
        custom_output_text: str | None = None,
        custom_output_args: Any = None,
        seed: int = 0,
    ) -> None:
        if isinstance(call_tools, str):
            if call_tools != "all":
                raise ValueError(
                    f"call_tools takes 'all' or a list of tool ids, such as [{call_tools!r}]"
                )
            self.call_tools: Literal["all"] | tuple[str, ...] = "all"
        else:
            names = tuple(call_tools)
            if not all(isinstance(name, str) for name in names):
                raise ValueError("call_tools takes 'all' or a list of tool ids (strings)")
            self.call_tools = names
        if custom_output_text is not None and not isinstance(custom_output_text, str):
            raise ValueError("custom_output_text must be a str")
        if custom_output_text is not None and custom_output_args is not None:
            raise ValueError("give custom_output_text or custom_output_args, not both")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, not {type(seed).__name__}")
        self.custom_output_text = custom_output_text
        self.custom_output_args = custom_output_args
        self._output_json: str | None = None
        if custom_output_args is not None:
            data = unstructure(custom_output_args)
            problem = json_problem(data)
            if problem is not None:
                raise ValueError(
                    f"custom_output_args has no JSON form: {problem.reason} @ ${problem.at}"
                )
            self._output_json = json.dumps(data, ensure_ascii=False)
        self.seed = seed
        self.requests: list[ModelRequest] = []

    def __repr__(self) -> str:
        return f"TestModel(call_tools={self.call_tools!r}, seed={self.seed})"

    async def complete(
        self, request: ModelRequest, *, on_text: TextSink | None = None
    ) -> ModelReply:
        """Call the request's tools, if its turn has not run them yet; answer otherwise."""
        self.requests.append(request)
        results = [
            entry
            for entry in request.entries
            if isinstance(entry, ToolResultEntry)
            and entry.turn_id is not None
            and entry.turn_id == request.turn_id
        ]
        if not results:
            calls = tuple(
                ToolCallRequest(
                    name=schema.name, arguments=self._arguments(schema.name, schema.parameters)
                )
                for schema in request.tools
                if self.call_tools == "all" or schema.name in self.call_tools
            )
            if calls:
                return ModelReply(tool_calls=calls)
        text = self._answer(request, results)
        if on_text is not None:
            await on_text(text)
        return ModelReply(text=text)

    def _arguments(self, name: str, schema: Mapping[str, Any]) -> Any:
        try:
            return value_for_schema(schema, seed=self.seed)
        except ModelError as error:
            raise ModelError(f"TestModel cannot call {name}: {error}") from None

    def _answer(self, request: ModelRequest, results: Sequence[ToolResultEntry]) -> str:
        if self.custom_output_text is not None:
            return self.custom_output_text
        if self._output_json is not None:
            return self._output_json
        if request.output_schema is not None:
            try:
                value = value_for_schema(request.output_schema, seed=self.seed)
            except ModelError as error:
                raise ModelError(f"TestModel cannot answer: {error}") from None
            return json.dumps(value, ensure_ascii=False)
        summary: dict[str, Any] = {}
        for result in results:
            value = result.structured_content
            if value is None:
                value = result.text
            summary[result.name or result.tool_call_id] = (
                {"error": result.text} if result.is_error else value
            )
        return json.dumps(summary, ensure_ascii=False)
