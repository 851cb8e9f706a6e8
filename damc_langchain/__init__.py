"""LangChain adapter for DAMC: translate LangChain messages, delegate to ``damc_core``."""

from .langgraph import damc_pre_model_hook
from .middleware import DamcMiddleware

__all__ = ["DamcMiddleware", "damc_pre_model_hook"]
