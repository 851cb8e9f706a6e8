"""LangChain adapter for DAMC: translate LangChain messages, delegate to ``damc_core``."""

from .callbacks import DamcCallbackHandler
from .langgraph import damc_pre_model_hook
from .middleware import DamcMiddleware

__all__ = ["DAMCMemory", "DamcCallbackHandler", "DamcMiddleware", "damc_pre_model_hook"]


def __getattr__(name: str) -> object:
    """``DAMCMemory`` needs langchain-classic, which the other surfaces do not: import it on use."""
    if name == "DAMCMemory":
        from .classic_memory import DAMCMemory

        return DAMCMemory
    raise AttributeError(name)
