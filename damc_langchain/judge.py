"""``ChatModelJudge``: a LangChain chat model as the judge of ``LLMJudgeValuator``."""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage


class ChatModelJudge:
    """Sends the judge prompt as one human message and returns the reply's text."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model

    @property
    def name(self) -> str:
        return f"langchain:{self.model._llm_type}"

    def complete(self, prompt: str) -> str:
        return str(self.model.invoke([HumanMessage(content=prompt)]).text)
