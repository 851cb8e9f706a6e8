"""A chat model that returns scripted replies and records exactly what reached it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field


class RecordingChatModel(BaseChatModel):
    """Replies with the scripted messages in order; ``received`` holds every prompt it was sent."""

    script: list[AIMessage]
    received: list[list[BaseMessage]] = Field(default_factory=list)
    tools_offered: list[str] = Field(default_factory=list)
    """Names of the tools the agent bound to the model."""

    @property
    def _llm_type(self) -> str:
        return "recording"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> RecordingChatModel:
        self.tools_offered[:] = [getattr(t, "name", None) or t["function"]["name"] for t in tools]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.received.append(list(messages))
        reply = self.script[len(self.received) - 1]
        return ChatResult(generations=[ChatGeneration(message=reply)])


@pytest.fixture
def recording_model():
    def make(*replies: AIMessage) -> RecordingChatModel:
        return RecordingChatModel(script=list(replies))

    return make
