"""Who may do what on a server: its tokens' principals, and tokens scoped to one session."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterable, Mapping

import attrs

from .._toolkit._inputs import SessionInput

__all__ = ["RIGHTS", "Access", "Principal", "Tokens"]

#: What a session-scoped token may be given: reading the session (its turns, records and
#: events), and answering its callbacks.
RIGHTS = frozenset({"read", "answer"})
#: The longest a session-scoped token lasts, in seconds.
MOST_SECONDS = 7 * 24 * 3600
_PREFIX = "as1"


class Principal(SessionInput):
    """Who started a session on a server with tokens: stored with the session, so that
    only requests of the same principal (or tokens scoped to it) find it."""

    input_id = "agentlib.principal"
    name: str


@attrs.frozen
class Access:
    """What a request may do: as a principal (every route of its own sessions), or with a
    token scoped to one session and some rights. Both None: the server takes no tokens."""

    principal: str | None = None
    session_id: str | None = None
    rights: frozenset[str] = frozenset()


class Tokens:
    """A server's tokens: each names a principal (its name, or a digest of the token for a
    token given without one); and the key that signs session-scoped tokens."""

    def __init__(self, tokens: Iterable[str] | Mapping[str, str]) -> None:
        if isinstance(tokens, Mapping):
            named = {token: name for name, token in tokens.items()}
        else:
            named = {token: _digest(token) for token in tokens}
        if any(not token for token in named):
            raise ValueError("a token must not be empty")
        self._principals = named
        material = "\0".join(sorted(named)).encode()
        self._key = hashlib.sha256(b"agentlib session tokens\0" + material).digest()

    def __bool__(self) -> bool:
        return bool(self._principals)

    def access(self, given: str) -> Access | None:
        """What the token ``given`` may do; None for a token this server does not take."""
        for token, principal in self._principals.items():
            if hmac.compare_digest(given.encode(), token.encode()):
                return Access(principal=principal)
        return self._scoped(given)

    def mint(self, session_id: str, rights: frozenset[str], seconds: float) -> tuple[str, int]:
        """A token for ``session_id`` with ``rights`` only, and when it expires."""
        expires = int(time.time() + seconds)
        claims = {"s": session_id, "r": sorted(rights), "e": expires}
        payload = _encode(json.dumps(claims, separators=(",", ":")).encode())
        return f"{_PREFIX}.{payload}.{self._sign(payload)}", expires

    def _scoped(self, given: str) -> Access | None:
        prefix, _, rest = given.partition(".")
        payload, _, signature = rest.partition(".")
        # Compared as bytes: compare_digest takes only ASCII str, and a token is what the
        # client sent (any text a header holds).
        if prefix != _PREFIX or not hmac.compare_digest(
            signature.encode(), self._sign(payload).encode()
        ):
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
            session_id, rights, expires = claims["s"], claims["r"], claims["e"]
        except (ValueError, KeyError, TypeError):
            return None
        if time.time() >= expires:
            return None
        return Access(session_id=session_id, rights=frozenset(rights) & RIGHTS)

    def _sign(self, payload: str) -> str:
        return _encode(hmac.new(self._key, payload.encode(), hashlib.sha256).digest())


def _digest(token: str) -> str:
    return "token-" + hashlib.sha256(token.encode()).hexdigest()[:16]


def _encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")
