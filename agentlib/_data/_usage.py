"""Token usage: what a model reply cost, and what a turn's replies cost together."""

from __future__ import annotations

import attrs

__all__ = ["Usage"]


def _count(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"Usage.{attribute.name} must be a count (an int >= 0), not {value!r}")


@attrs.frozen(kw_only=True)
class Usage:
    """Tokens a model's replies took, as the provider reported them.

    Usages add up: ``a + b`` counts both.

    Attributes:
        input_tokens: Tokens of the request (the prompt).
        output_tokens: Tokens of the reply (the completion).
        total_tokens: Both, as the provider counts them.
        requests: How many replies this counts.
    """

    input_tokens: int = attrs.field(default=0, validator=_count)
    output_tokens: int = attrs.field(default=0, validator=_count)
    total_tokens: int = attrs.field(default=0, validator=_count)
    requests: int = attrs.field(default=1, validator=_count)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            requests=self.requests + other.requests,
        )
