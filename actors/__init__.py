"""Behaviour: the Session API (messages, context blocks, compaction, search,
tools), the SessionManager and the Agent base class. Uses ``storage`` only.
"""

from common.errors import (
    CompactionError,
    ConflictError,
    ContextBlockError,
    InvalidInputError,
    InvalidMessageError,
    MessageNotFoundError,
    NotFoundError,
    SessionError,
)

from .agent import Agent, AgentContext, AlarmInfo, ConnectionLike
from .context import (
    AgentContextProvider,
    AgentSearchProvider,
    ContextBlock,
    ContextBlocks,
    ContextProvider,
    SearchProvider,
    SkillProvider,
    WritableContextProvider,
)
from .manager import SessionManager
from .manager_agent import ManagerAgent
from .session import Session
from .session_agent import BlockConfig, CompactionConfig, SessionAgent, SessionConfig
from .skills import DirectorySkillProvider
from .tools import Tool

__all__ = [
    "BlockConfig",
    "CompactionConfig",
    "SessionAgent",
    "SessionConfig",
    "AgentContextProvider",
    "AgentSearchProvider",
    "ContextBlock",
    "ContextBlocks",
    "ContextProvider",
    "DirectorySkillProvider",
    "SearchProvider",
    "Session",
    "SessionManager",
    "ManagerAgent",
    "SkillProvider",
    "Tool",
    "WritableContextProvider",
    "Agent",
    "AgentContext",
    "AlarmInfo",
    "ConnectionLike",
    "CompactionError",
    "ConflictError",
    "ContextBlockError",
    "InvalidInputError",
    "InvalidMessageError",
    "MessageNotFoundError",
    "NotFoundError",
    "SessionError",
]
