"""LangChain adapter for DAMC (see the damc_langchain issue)."""
