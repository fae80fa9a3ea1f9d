"""agentlib: a trio-native agent runtime.

Define an :class:`Agent`, start sessions with it and drive them by turns; every session is
an append-only log of events. ``agentlib_sync`` offers the same API as blocking calls.
"""

from ._data._callbacks import AllowApproval as AllowApproval
from ._data._callbacks import ApprovalAnswer as ApprovalAnswer
from ._data._callbacks import Callback as Callback
from ._data._callbacks import Credentials as Credentials
from ._data._callbacks import DenyApproval as DenyApproval
from ._data._callbacks import KeepCallbackOpen as KeepCallbackOpen
from ._data._callbacks import OpenApproval as OpenApproval
from ._data._callbacks import OpenClientToolCall as OpenClientToolCall
from ._data._callbacks import OpenSignIn as OpenSignIn
from ._data._callbacks import SignInAnswer as SignInAnswer
from ._data._callbacks import UnknownCallback as UnknownCallback
from ._data._content import AudioContentBlock as AudioContentBlock
from ._data._content import ContentAnnotations as ContentAnnotations
from ._data._content import ContentBlock as ContentBlock
from ._data._content import EmbeddedResourceContentBlock as EmbeddedResourceContentBlock
from ._data._content import ImageContentBlock as ImageContentBlock
from ._data._content import ResourceLinkContentBlock as ResourceLinkContentBlock
from ._data._content import TextContentBlock as TextContentBlock
from ._data._content import UnknownContentBlock as UnknownContentBlock
from ._data._convert import structure as structure
from ._data._convert import unstructure as unstructure
from ._data._entries import ContextMessage as ContextMessage
from ._data._entries import Entry as Entry
from ._data._entries import MessageEntry as MessageEntry
from ._data._entries import ToolCallEntry as ToolCallEntry
from ._data._entries import ToolResultEntry as ToolResultEntry
from ._data._entries import UnknownEntry as UnknownEntry
from ._data._errors import AuthenticationError as AuthenticationError
from ._data._errors import ClientToolAnswerError as ClientToolAnswerError
from ._data._errors import InvalidCursorError as InvalidCursorError
from ._data._errors import LeaseLost as LeaseLost
from ._data._errors import LeaseRefused as LeaseRefused
from ._data._errors import MaxStepsExceeded as MaxStepsExceeded
from ._data._errors import ModelError as ModelError
from ._data._errors import ObservationLost as ObservationLost
from ._data._errors import SandboxError as SandboxError
from ._data._errors import SdkError as SdkError
from ._data._errors import ServerUnreachableError as ServerUnreachableError
from ._data._errors import SessionBusyError as SessionBusyError
from ._data._errors import SessionIdempotencyConflictError as SessionIdempotencyConflictError
from ._data._errors import SessionNotFoundError as SessionNotFoundError
from ._data._errors import SessionTerminatedError as SessionTerminatedError
from ._data._errors import StoreError as StoreError
from ._data._errors import StoreSchemaError as StoreSchemaError
from ._data._errors import TurnNotCompletedError as TurnNotCompletedError
from ._data._errors import TurnNotFoundError as TurnNotFoundError
from ._data._errors import UnsupportedSessionProcedureError as UnsupportedSessionProcedureError
from ._data._errors import ValidationError as ValidationError
from ._data._events import CallbackClosed as CallbackClosed
from ._data._events import CallbackOpened as CallbackOpened
from ._data._events import EntryAdded as EntryAdded
from ._data._events import EntryCompleted as EntryCompleted
from ._data._events import EntryDelta as EntryDelta
from ._data._events import Event as Event
from ._data._events import TurnEnded as TurnEnded
from ._data._events import TurnStarted as TurnStarted
from ._data._events import UnknownEvent as UnknownEvent
from ._data._history import parse_history as parse_history
from ._data._history_items import HistoryImportEntry as HistoryImportEntry
from ._data._history_items import HistoryImportMessage as HistoryImportMessage
from ._data._history_items import HistoryImportReasoning as HistoryImportReasoning
from ._data._history_items import HistoryImportSnapshot as HistoryImportSnapshot
from ._data._history_items import HistoryImportToolCall as HistoryImportToolCall
from ._data._history_items import HistoryImportToolResult as HistoryImportToolResult
from ._data._records import AlreadySettled as AlreadySettled
from ._data._records import Answered as Answered
from ._data._records import Blocked as Blocked
from ._data._records import Busy as Busy
from ._data._records import Completed as Completed
from ._data._records import ErrorInfo as ErrorInfo
from ._data._records import Failed as Failed
from ._data._records import Interrupted as Interrupted
from ._data._records import NotFound as NotFound
from ._data._records import Running as Running
from ._data._records import TurnConflict as TurnConflict
from ._data._records import TurnState as TurnState
from ._data._records import UnknownOutcome as UnknownOutcome
from ._data._records import UnknownRecord as UnknownRecord
from ._data._usage import Usage as Usage
from ._define._agent import Agent as Agent
from ._engine._runtime import Runtime as Runtime
from ._engine._runtime import RuntimeHealth as RuntimeHealth
from ._http._client import RemoteAgent as RemoteAgent
from ._http._serve import serve as serve
from ._mcp._oauth import MCPOAuth as MCPOAuth
from ._mcp._servers import RemoteMCP as RemoteMCP
from ._mcp._servers import StdioMCP as StdioMCP
from ._models._base import Model as Model
from ._models._base import ModelReply as ModelReply
from ._models._base import ModelRequest as ModelRequest
from ._models._base import ToolCallRequest as ToolCallRequest
from ._models._base import ToolSchema as ToolSchema
from ._models._chat import MistralModel as MistralModel
from ._models._chat import OpenAICompatibleModel as OpenAICompatibleModel
from ._models._scripted import FunctionModel as FunctionModel
from ._models._scripted import ScriptedModel as ScriptedModel
from ._references._open import current_runtime as current_runtime
from ._references._open import open_runtime as open_runtime
from ._references._session import Session as Session
from ._references._session import Turn as Turn
from ._sandboxes._bashkit import BashkitSandbox as BashkitSandbox
from ._sandboxes._local import CommandResult as CommandResult
from ._sandboxes._local import DangerousLocalSandbox as DangerousLocalSandbox
from ._sandboxes._local import IsolatedSandbox as IsolatedSandbox
from ._sandboxes._local import NoSandbox as NoSandbox
from ._sandboxes._local import ProcessOutput as ProcessOutput
from ._sandboxes._local import SandboxCallbackContext as SandboxCallbackContext
from ._sandboxes._local import SandboxHook as SandboxHook
from ._sandboxes._local import Workspace as Workspace
from ._store import MemoryStore as MemoryStore
from ._store import SQLiteStore as SQLiteStore
from ._store import Store as Store
from ._toolkit._hooks import DenyToolCall as DenyToolCall
from ._toolkit._hooks import Hook as Hook
from ._toolkit._hooks import HookDecision as HookDecision
from ._toolkit._hooks import ModifiedArguments as ModifiedArguments
from ._toolkit._hooks import RequestApproval as RequestApproval
from ._toolkit._hooks import pre_tool_call as pre_tool_call
from ._toolkit._inputs import Depends as Depends
from ._toolkit._inputs import SessionInput as SessionInput
from ._toolkit._tools import Tool as Tool
from ._toolkit._tools import ToolSource as ToolSource
from ._toolkit._tools import client_tool as client_tool
from ._toolkit._tools import tool as tool

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AllowApproval",
    "AlreadySettled",
    "Answered",
    "ApprovalAnswer",
    "AudioContentBlock",
    "AuthenticationError",
    "BashkitSandbox",
    "Blocked",
    "Busy",
    "Callback",
    "CallbackClosed",
    "CallbackOpened",
    "ClientToolAnswerError",
    "CommandResult",
    "Completed",
    "ContentAnnotations",
    "ContentBlock",
    "ContextMessage",
    "Credentials",
    "DangerousLocalSandbox",
    "DenyApproval",
    "DenyToolCall",
    "Depends",
    "EmbeddedResourceContentBlock",
    "Entry",
    "EntryAdded",
    "EntryCompleted",
    "EntryDelta",
    "ErrorInfo",
    "Event",
    "Failed",
    "FunctionModel",
    "HistoryImportEntry",
    "HistoryImportMessage",
    "HistoryImportReasoning",
    "HistoryImportSnapshot",
    "HistoryImportToolCall",
    "HistoryImportToolResult",
    "Hook",
    "HookDecision",
    "ImageContentBlock",
    "Interrupted",
    "InvalidCursorError",
    "IsolatedSandbox",
    "KeepCallbackOpen",
    "LeaseLost",
    "LeaseRefused",
    "MCPOAuth",
    "MaxStepsExceeded",
    "MemoryStore",
    "MessageEntry",
    "MistralModel",
    "Model",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "ModifiedArguments",
    "NoSandbox",
    "NotFound",
    "ObservationLost",
    "OpenAICompatibleModel",
    "OpenApproval",
    "OpenClientToolCall",
    "OpenSignIn",
    "ProcessOutput",
    "RemoteAgent",
    "RemoteMCP",
    "RequestApproval",
    "ResourceLinkContentBlock",
    "Running",
    "Runtime",
    "RuntimeHealth",
    "SQLiteStore",
    "SandboxCallbackContext",
    "SandboxError",
    "SandboxHook",
    "ScriptedModel",
    "SdkError",
    "ServerUnreachableError",
    "Session",
    "SessionBusyError",
    "SessionIdempotencyConflictError",
    "SessionInput",
    "SessionNotFoundError",
    "SessionTerminatedError",
    "SignInAnswer",
    "StdioMCP",
    "Store",
    "StoreError",
    "StoreSchemaError",
    "TextContentBlock",
    "Tool",
    "ToolCallEntry",
    "ToolCallRequest",
    "ToolResultEntry",
    "ToolSchema",
    "ToolSource",
    "Turn",
    "TurnConflict",
    "TurnEnded",
    "TurnNotCompletedError",
    "TurnNotFoundError",
    "TurnStarted",
    "TurnState",
    "UnknownCallback",
    "UnknownContentBlock",
    "UnknownEntry",
    "UnknownEvent",
    "UnknownOutcome",
    "UnknownRecord",
    "UnsupportedSessionProcedureError",
    "Usage",
    "ValidationError",
    "Workspace",
    "client_tool",
    "current_runtime",
    "open_runtime",
    "parse_history",
    "pre_tool_call",
    "serve",
    "structure",
    "tool",
    "unstructure",
]


def _set_public_module() -> None:
    # Public names say `agentlib.Completed`, not `agentlib._data._records.Completed` (as trio does).
    # Type hints are resolved first: they are looked up in the defining module's globals.
    import inspect

    import attrs

    for name in __all__:
        obj = globals()[name]
        if attrs.has(obj):
            attrs.resolve_types(obj)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            obj.__module__ = __name__


_set_public_module()
del _set_public_module
