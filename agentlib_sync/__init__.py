"""agentlib_sync: agentlib as blocking calls, for scripts and notebooks.

The data classes and errors are agentlib's own objects, re-exported unchanged
(``agentlib_sync.Completed is agentlib.Completed``).
"""

from agentlib import AllowApproval as AllowApproval
from agentlib import AlreadySettled as AlreadySettled
from agentlib import Answered as Answered
from agentlib import ApprovalAnswer as ApprovalAnswer
from agentlib import AudioContentBlock as AudioContentBlock
from agentlib import Blocked as Blocked
from agentlib import Busy as Busy
from agentlib import Callback as Callback
from agentlib import CallbackClosed as CallbackClosed
from agentlib import CallbackOpened as CallbackOpened
from agentlib import ClientToolAnswerError as ClientToolAnswerError
from agentlib import Completed as Completed
from agentlib import ContentAnnotations as ContentAnnotations
from agentlib import ContentBlock as ContentBlock
from agentlib import ContextMessage as ContextMessage
from agentlib import Credentials as Credentials
from agentlib import DenyApproval as DenyApproval
from agentlib import EmbeddedResourceContentBlock as EmbeddedResourceContentBlock
from agentlib import Entry as Entry
from agentlib import EntryAdded as EntryAdded
from agentlib import EntryCompleted as EntryCompleted
from agentlib import EntryDelta as EntryDelta
from agentlib import ErrorInfo as ErrorInfo
from agentlib import Event as Event
from agentlib import Failed as Failed
from agentlib import HistoryImportEntry as HistoryImportEntry
from agentlib import HistoryImportMessage as HistoryImportMessage
from agentlib import HistoryImportReasoning as HistoryImportReasoning
from agentlib import HistoryImportSnapshot as HistoryImportSnapshot
from agentlib import HistoryImportToolCall as HistoryImportToolCall
from agentlib import HistoryImportToolResult as HistoryImportToolResult
from agentlib import ImageContentBlock as ImageContentBlock
from agentlib import Interrupted as Interrupted
from agentlib import InvalidCursorError as InvalidCursorError
from agentlib import KeepCallbackOpen as KeepCallbackOpen
from agentlib import MessageEntry as MessageEntry
from agentlib import ModelError as ModelError
from agentlib import NotFound as NotFound
from agentlib import ObservationLost as ObservationLost
from agentlib import OpenApproval as OpenApproval
from agentlib import OpenClientToolCall as OpenClientToolCall
from agentlib import OpenSignIn as OpenSignIn
from agentlib import ResourceLinkContentBlock as ResourceLinkContentBlock
from agentlib import Running as Running
from agentlib import SdkError as SdkError
from agentlib import SessionBusyError as SessionBusyError
from agentlib import SessionIdempotencyConflictError as SessionIdempotencyConflictError
from agentlib import SessionTerminatedError as SessionTerminatedError
from agentlib import SignInAnswer as SignInAnswer
from agentlib import TextContentBlock as TextContentBlock
from agentlib import ToolCallEntry as ToolCallEntry
from agentlib import ToolResultEntry as ToolResultEntry
from agentlib import TurnConflict as TurnConflict
from agentlib import TurnEnded as TurnEnded
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
from agentlib import ValidationError as ValidationError
from agentlib import parse_history as parse_history
from agentlib import structure as structure
from agentlib import unstructure as unstructure

__all__ = [
    "AllowApproval",
    "AlreadySettled",
    "Answered",
    "ApprovalAnswer",
    "AudioContentBlock",
    "Blocked",
    "Busy",
    "Callback",
    "CallbackClosed",
    "CallbackOpened",
    "ClientToolAnswerError",
    "Completed",
    "ContentAnnotations",
    "ContentBlock",
    "ContextMessage",
    "Credentials",
    "DenyApproval",
    "EmbeddedResourceContentBlock",
    "Entry",
    "EntryAdded",
    "EntryCompleted",
    "EntryDelta",
    "ErrorInfo",
    "Event",
    "Failed",
    "HistoryImportEntry",
    "HistoryImportMessage",
    "HistoryImportReasoning",
    "HistoryImportSnapshot",
    "HistoryImportToolCall",
    "HistoryImportToolResult",
    "ImageContentBlock",
    "Interrupted",
    "InvalidCursorError",
    "KeepCallbackOpen",
    "MessageEntry",
    "ModelError",
    "NotFound",
    "ObservationLost",
    "OpenApproval",
    "OpenClientToolCall",
    "OpenSignIn",
    "ResourceLinkContentBlock",
    "Running",
    "SdkError",
    "SessionBusyError",
    "SessionIdempotencyConflictError",
    "SessionTerminatedError",
    "SignInAnswer",
    "TextContentBlock",
    "ToolCallEntry",
    "ToolResultEntry",
    "TurnConflict",
    "TurnEnded",
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
    "ValidationError",
    "parse_history",
    "structure",
    "unstructure",
]
