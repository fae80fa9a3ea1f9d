"""agentlib.aio: agentlib's API awaited from asyncio, for asyncio services and notebooks.

``Agent``, ``Session`` and ``Turn`` are asyncio twins of agentlib's: the same arguments,
each method one hop into the engine, which runs on its own thread (``agentlib_sync``'s: a
script may use both), and back to the caller's loop. Handlers given here (``on_approval``,
``on_sign_in``, ``on_client_tool``, ``on_event``) may be coroutine functions or plain
functions, and run on the caller's loop; so do an agent's tools and hooks that are
coroutine functions. Everything else (data classes, errors, models, ``tool``) is agentlib's
own object, re-exported unchanged (``agentlib.aio.Completed is agentlib.Completed``).

Importing ``agentlib`` does not import this module (nor asyncio): ``import agentlib.aio``.
"""

from agentlib import AllowApproval as AllowApproval
from agentlib import AlreadySettled as AlreadySettled
from agentlib import Answered as Answered
from agentlib import ApprovalAnswer as ApprovalAnswer
from agentlib import AudioContentBlock as AudioContentBlock
from agentlib import AuthenticationError as AuthenticationError
from agentlib import BashkitSandbox as BashkitSandbox
from agentlib import Blocked as Blocked
from agentlib import Busy as Busy
from agentlib import Callback as Callback
from agentlib import CallbackClosed as CallbackClosed
from agentlib import CallbackOpened as CallbackOpened
from agentlib import ClientToolAnswerError as ClientToolAnswerError
from agentlib import CommandResult as CommandResult
from agentlib import Completed as Completed
from agentlib import ContentAnnotations as ContentAnnotations
from agentlib import ContentBlock as ContentBlock
from agentlib import ContextMessage as ContextMessage
from agentlib import Credentials as Credentials
from agentlib import DangerousLocalSandbox as DangerousLocalSandbox
from agentlib import DenyApproval as DenyApproval
from agentlib import DenyToolCall as DenyToolCall
from agentlib import Depends as Depends
from agentlib import EmbeddedResourceContentBlock as EmbeddedResourceContentBlock
from agentlib import Entry as Entry
from agentlib import EntryAdded as EntryAdded
from agentlib import EntryCompleted as EntryCompleted
from agentlib import EntryDelta as EntryDelta
from agentlib import ErrorInfo as ErrorInfo
from agentlib import Event as Event
from agentlib import Failed as Failed
from agentlib import FunctionModel as FunctionModel
from agentlib import HistoryImportEntry as HistoryImportEntry
from agentlib import HistoryImportMessage as HistoryImportMessage
from agentlib import HistoryImportReasoning as HistoryImportReasoning
from agentlib import HistoryImportSnapshot as HistoryImportSnapshot
from agentlib import HistoryImportToolCall as HistoryImportToolCall
from agentlib import HistoryImportToolResult as HistoryImportToolResult
from agentlib import Hook as Hook
from agentlib import HookDecision as HookDecision
from agentlib import ImageContentBlock as ImageContentBlock
from agentlib import Interrupted as Interrupted
from agentlib import InvalidCursorError as InvalidCursorError
from agentlib import IsolatedSandbox as IsolatedSandbox
from agentlib import KeepCallbackOpen as KeepCallbackOpen
from agentlib import LeaseLost as LeaseLost
from agentlib import LeaseRefused as LeaseRefused
from agentlib import MaxStepsExceeded as MaxStepsExceeded
from agentlib import MCPOAuth as MCPOAuth
from agentlib import MemoryStore as MemoryStore
from agentlib import MessageEntry as MessageEntry
from agentlib import MistralModel as MistralModel
from agentlib import Model as Model
from agentlib import ModelError as ModelError
from agentlib import ModelReply as ModelReply
from agentlib import ModelRequest as ModelRequest
from agentlib import ModifiedArguments as ModifiedArguments
from agentlib import NoSandbox as NoSandbox
from agentlib import NotFound as NotFound
from agentlib import ObservationLost as ObservationLost
from agentlib import OpenAICompatibleModel as OpenAICompatibleModel
from agentlib import OpenApproval as OpenApproval
from agentlib import OpenClientToolCall as OpenClientToolCall
from agentlib import OpenSignIn as OpenSignIn
from agentlib import ProcessOutput as ProcessOutput
from agentlib import RemoteMCP as RemoteMCP
from agentlib import RequestApproval as RequestApproval
from agentlib import ResourceLinkContentBlock as ResourceLinkContentBlock
from agentlib import Running as Running
from agentlib import Runtime as Runtime
from agentlib import RuntimeHealth as RuntimeHealth
from agentlib import SandboxCallbackContext as SandboxCallbackContext
from agentlib import SandboxError as SandboxError
from agentlib import SandboxHook as SandboxHook
from agentlib import ScriptedModel as ScriptedModel
from agentlib import SdkError as SdkError
from agentlib import ServerUnreachableError as ServerUnreachableError
from agentlib import SessionBusyError as SessionBusyError
from agentlib import SessionIdempotencyConflictError as SessionIdempotencyConflictError
from agentlib import SessionInput as SessionInput
from agentlib import SessionNotFoundError as SessionNotFoundError
from agentlib import SessionTerminatedError as SessionTerminatedError
from agentlib import SignInAnswer as SignInAnswer
from agentlib import SQLiteStore as SQLiteStore
from agentlib import StdioMCP as StdioMCP
from agentlib import Store as Store
from agentlib import StoreError as StoreError
from agentlib import StoreSchemaError as StoreSchemaError
from agentlib import TextContentBlock as TextContentBlock
from agentlib import Tool as Tool
from agentlib import ToolCallEntry as ToolCallEntry
from agentlib import ToolCallRequest as ToolCallRequest
from agentlib import ToolResultEntry as ToolResultEntry
from agentlib import ToolSchema as ToolSchema
from agentlib import ToolSource as ToolSource
from agentlib import TurnConflict as TurnConflict
from agentlib import TurnEnded as TurnEnded
from agentlib import TurnNotCompletedError as TurnNotCompletedError
from agentlib import TurnNotFoundError as TurnNotFoundError
from agentlib import TurnStarted as TurnStarted
from agentlib import TurnState as TurnState
from agentlib import UnknownCallback as UnknownCallback
from agentlib import UnknownContentBlock as UnknownContentBlock
from agentlib import UnknownEntry as UnknownEntry
from agentlib import UnknownEvent as UnknownEvent
from agentlib import UnknownOutcome as UnknownOutcome
from agentlib import UnknownRecord as UnknownRecord
from agentlib import UnsupportedSessionProcedureError as UnsupportedSessionProcedureError
from agentlib import Usage as Usage
from agentlib import ValidationError as ValidationError
from agentlib import Workspace as Workspace
from agentlib import client_tool as client_tool
from agentlib import current_runtime as current_runtime
from agentlib import open_runtime as open_runtime
from agentlib import parse_history as parse_history
from agentlib import pre_tool_call as pre_tool_call
from agentlib import serve as serve
from agentlib import structure as structure
from agentlib import tool as tool
from agentlib import unstructure as unstructure

from ._facade import Agent as Agent
from ._facade import RemoteAgent as RemoteAgent
from ._facade import Session as Session
from ._facade import Turn as Turn
from ._facade import configure as configure

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
    "configure",
    "current_runtime",
    "open_runtime",
    "parse_history",
    "pre_tool_call",
    "serve",
    "structure",
    "tool",
    "unstructure",
]
