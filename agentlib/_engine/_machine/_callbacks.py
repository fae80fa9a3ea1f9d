"""The transitions of a turn's callbacks: opening one (an approval, a client tool's call, a
sign-in), checking an answer against it, and closing it, answered or not, in every log that
shows it."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from ..._data._callbacks import (
    AllowApproval,
    Callback,
    Credentials,
    DenyApproval,
    KeepCallbackOpen,
    OpenApproval,
    OpenClientToolCall,
    OpenSignIn,
    SignInAnswer,
)
from ..._data._errors import ClientToolAnswerError, SdkError, ValidationError
from ..._data._events import CallbackClosed, CallbackOpened
from ..._data._ops import CallbackRow, KeyRow
from ._queries import ancestors, tree_of
from ._state import CallbackPhase, CallState, Facts, SessionMachine, Sessions, TurnMachine

#: reach the model).
_NOT_RESULTS = (AllowApproval, DenyApproval, SignInAnswer, Credentials, KeepCallbackOpen)


def check_not_a_class(answer: object) -> None:
    """Raises:
    SdkError: ``answer`` is a class (``AllowApproval``), not an instance of it."""
    if isinstance(answer, type):
        raise SdkError(
            f"{answer.__name__} is a class: answer with an instance, {answer.__name__}(...)"
        )


def fit_answer(callback: Callback, answer: object, tools: Mapping[str, Any]) -> Any:
    """``answer`` checked against the callback it settles (a client tool's against its
    stub's return type, ``tools`` by id).

    Raises:
        ValidationError: It does not fit (a :class:`ClientToolAnswerError` for a client
            tool): an SdkError; the message never repeats a credential or the value.
    """
    check_not_a_class(answer)
    if isinstance(callback, OpenApproval):
        if not isinstance(answer, (AllowApproval, DenyApproval)):
            raise ValidationError(
                f"an approval is answered with AllowApproval() or DenyApproval(reason), "
                f"not a {type(answer).__name__}"
            )
        if isinstance(answer, AllowApproval) and (
            callback.source == "hook" and answer.scope == "session"
        ):
            raise ValidationError(
                "a hook asked for this approval, so it can only be allowed once: "
                'answer AllowApproval() (scope="once")'
            )
        return answer
    if isinstance(callback, OpenSignIn):
        if not isinstance(answer, SignInAnswer):
            raise ValidationError(
                f"a sign-in is answered with SignInAnswer(credentials={{source: ...}}), "
                f"not a {type(answer).__name__}"
            )
        missing = [s for s in callback.sources if s not in answer.credentials]
        extra = sorted(s for s in answer.credentials if s not in callback.sources)
        if missing or extra:
            problems = []
            if missing:
                problems.append("no credential for " + ", ".join(map(repr, missing)))
            if extra:
                problems.append(
                    "credentials for sources not asked for: " + ", ".join(map(repr, extra))
                )
            raise ValidationError(
                f"the SignInAnswer must name every requested source and only those "
                f"({', '.join(map(repr, callback.sources))}): {'; '.join(problems)}"
            )
        return answer
    assert isinstance(callback, OpenClientToolCall), "only known callbacks are opened"
    if isinstance(answer, _NOT_RESULTS):
        raise ClientToolAnswerError(
            f"a {type(answer).__name__} answers another kind of callback; a client tool "
            "call is answered with the tool's result"
        )
    return tools[callback.tool_name].check_answer(answer)


def sources_to_sign_in(
    turn: TurnMachine, needs: Mapping[int, str], credentials: Mapping[str, str]
) -> tuple[str, ...]:
    """The sources the step's calls need credentials for, that the session lacks (``needs``:
    the source of each call, by index, whose tool needs a sign-in)."""
    assert turn.step is not None
    sources: list[str] = []
    for index, source in needs.items():
        call = turn.step.calls[index]
        if (
            call.refusal is None
            and call.state not in (CallState.DONE, CallState.RUNNING)
            and source not in credentials
            and source not in sources
        ):
            sources.append(source)
    return tuple(sources)


def open_sign_in(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    sources: tuple[str, ...],
    authorization_urls: Mapping[str, str] | None = None,
) -> tuple[str, Facts]:
    """The turn's sign-in callback: one a runtime before this one opened and left open, or
    a new one for ``sources`` (with the ``authorization_urls`` of those that have one)."""
    session = sessions[session_id]
    for state in session.callbacks.values():
        callback = state.callback
        if state.open and isinstance(callback, OpenSignIn) and callback.turn_id == turn_id:
            return callback.id, Facts(sessions)
    return open_callback(
        sessions,
        session_id,
        turn_id,
        OpenSignIn,
        sources=sources,
        authorization_urls=authorization_urls or {},
    )


def open_callback(
    sessions: Sessions,
    session_id: str,
    turn_id: str,
    callback_type: type[OpenApproval | OpenClientToolCall | OpenSignIn],
    **fields: Any,
) -> tuple[str, Facts]:
    """Open a callback the turn waits on. ``CallbackOpened`` joins the session's log, and
    the log of every session above it (whose turn that delegated to it reads Blocked)."""
    facts = Facts(sessions)
    session = sessions[session_id]
    callback = callback_type(id=str(uuid.uuid4()), session_id=session.id, turn_id=turn_id, **fields)
    facts.add(CallbackRow(session.id, callback))
    facts.emit(session, CallbackOpened, turn_id, callback=callback)
    for ancestor, delegating in ancestors(sessions, session_id):
        facts.emit(ancestor, CallbackOpened, delegating.id, callback=callback)
    return callback.id, facts


def close_callback(
    sessions: Sessions,
    session_id: str,
    callback_id: str,
    *,
    answered: bool = True,
    answer: Any = None,
    error: str | None = None,
    key: str | None = None,
) -> Facts:
    """Close an open callback of the session with ``answer`` (or a client tool's ``error``),
    or unanswered when its turn stopped; ``CallbackClosed`` joins every log that showed it.
    An approval for the whole session closes the tool's other open approvals too. The
    answer's idempotency ``key`` (see :func:`answer_key`) is kept with it."""
    facts = Facts(sessions)
    session = sessions[session_id]
    if key is not None and session.callbacks[callback_id].open:
        callback = session.callbacks[callback_id].callback
        facts.add(KeyRow(session.id, key, callback.turn_id, "answer"))
    add_close(facts, session, callback_id, answered, answer, error)
    return facts


def show_settled(sessions: Sessions, root_id: str) -> Facts:
    """The ``CallbackClosed`` events of the tree's callbacks that were settled in the store
    by another runtime (a shared store's claim) while their logs still show them open: each
    joins every log that showed it, as a close here would."""
    facts = Facts(sessions)
    for session in tree_of(sessions, root_id):
        for callback_id, state in session.callbacks.items():
            if state.open or callback_id not in session.shown:
                continue
            callback = state.callback
            answer = (
                state.answer if isinstance(state.answer, (AllowApproval, DenyApproval)) else None
            )
            answered = state.phase is CallbackPhase.ANSWERED
            closed = {"callback_id": callback_id, "answer": answer, "answered": answered}
            facts.emit(session, CallbackClosed, callback.turn_id, **closed)
            for ancestor, delegating in ancestors(facts.sessions, session.id):
                facts.emit(ancestor, CallbackClosed, delegating.id, **closed)
    return facts


def answer_key(callback_id: str, key: str) -> str:
    """How the idempotency key ``key`` of an answer to ``callback_id`` is kept among the
    session's keys."""
    return f"answer {callback_id} {key}"


def add_close(
    facts: Facts,
    session: SessionMachine,
    callback_id: str,
    answered: bool,
    answer: Any,
    error: str | None,
) -> None:
    """Add to ``facts`` the closing of the session's callback ``callback_id``, if it is
    open (what :func:`close_callback` brings; an ending turn closes its own unanswered)."""
    state = session.callbacks[callback_id]
    if not state.open:
        return
    callback = state.callback
    stored = None if isinstance(answer, SignInAnswer) else answer  # credentials never stored
    facts.add(
        CallbackRow(session.id, callback, "answered" if answered else "closed", stored, error)
    )
    state.answer = answer  # the live answer (a sign-in's credentials reach its turn)
    shown_answer = answer if isinstance(answer, (AllowApproval, DenyApproval)) else None
    closed = {"callback_id": callback.id, "answer": shown_answer, "answered": answered}
    facts.emit(session, CallbackClosed, callback.turn_id, **closed)
    for ancestor, delegating in ancestors(facts.sessions, session.id):
        facts.emit(ancestor, CallbackClosed, delegating.id, **closed)
    if isinstance(answer, AllowApproval) and answer.scope == "session":
        assert isinstance(callback, OpenApproval)
        for other_id, other in list(session.callbacks.items()):
            waiting = other.callback
            if (
                other.open
                and isinstance(waiting, OpenApproval)
                and waiting.source == "tool"
                and waiting.tool_name == callback.tool_name
            ):
                add_close(facts, session, other_id, True, answer, None)
