"""``ChatModelJudge``: a LangChain chat model as the judge of ``LLMJudgeValuator``."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable


class ChatModelJudge:
    """Sends the judge prompt as one human message and returns the reply's text.

    The model may be a chat model, a wrapped one, or a runnable that answers with text (a text
    completion model, ``model | StrOutputParser()``)."""

    def __init__(self, model: BaseChatModel | Runnable[Any, Any]) -> None:
        self.model = model

    @property
    def name(self) -> str:
        # a wrapped model (``model.with_retry()``) is a Runnable without ``_llm_type``
        return f"langchain:{getattr(self.model, '_llm_type', type(self.model).__name__)}"

    def complete(self, prompt: str) -> str:
        # a rating made while a graph runs is DAMC's, not the agent's answer: langgraph's
        # ``stream_mode="messages"`` leaves out the calls tagged ``nostream`` (TAG_NOSTREAM)
        reply = self.model.invoke([HumanMessage(content=prompt)], config={"tags": ["nostream"]})
        return reply if isinstance(reply, str) else str(reply.text)
