"""LlamaIndex adapter for DAMC (see the damc_llamaindex issue)."""
