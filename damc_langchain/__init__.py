"""LangChain adapter for DAMC: translate LangChain messages, delegate to ``damc_core``."""

from .middleware import DamcMiddleware

__all__ = ["DamcMiddleware"]
