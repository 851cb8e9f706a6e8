"""LangChain adapter for DAMC: translate LangChain messages, delegate to ``damc_core``."""

from .callbacks import DamcCallbackHandler
from .chat_history import DamcChatMessageHistory
from .judge import ChatModelJudge
from .langgraph import damc_post_model_hook, damc_pre_model_hook
from .middleware import DamcMiddleware
from .recall import recall_tool

__all__ = [
    "ChatModelJudge",
    "DAMCMemory",
    "DamcCallbackHandler",
    "DamcChatMessageHistory",
    "DamcMiddleware",
    "damc_post_model_hook",
    "damc_pre_model_hook",
    "recall_tool",
    "wrap",
]


def __getattr__(name: str) -> object:
    """``DAMCMemory`` and ``wrap`` need langchain-classic, which the other surfaces do not."""
    if name == "DAMCMemory":
        from .classic_memory import DAMCMemory

        return DAMCMemory
    if name == "wrap":
        from .executor import wrap

        return wrap
    raise AttributeError(name)
