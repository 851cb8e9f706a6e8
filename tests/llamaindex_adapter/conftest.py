"""A function-calling LLM that replies from a script and records exactly what reached it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    LLMMetadata,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import Field
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.llms.utils import parse_partial_json


class RecordingLLM(FunctionCallingLLM):
    """Replies with the scripted messages in order; ``received`` holds every input it was sent."""

    script: list[ChatMessage]
    received: list[list[ChatMessage]] = Field(default_factory=list)
    function_calling: bool = True

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(is_chat_model=True, is_function_calling_model=self.function_calling)

    def _reply(self, messages: Sequence[ChatMessage]) -> ChatMessage:
        self.received.append([m.model_copy(deep=True) for m in messages])
        return self.script[len(self.received) - 1].model_copy(deep=True)

    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return ChatResponse(message=self._reply(messages))

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self.chat(messages)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        reply = self._reply(messages)

        def chunks() -> Iterator[ChatResponse]:
            yield ChatResponse(message=reply, delta=reply.content or "")

        return chunks()

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        reply = self._reply(messages)
        text = reply.content or ""
        half = len(text) // 2

        async def chunks() -> AsyncIterator[ChatResponse]:
            if half:  # two chunks, like a streaming provider: a partial one, then the whole message
                yield ChatResponse(
                    message=ChatMessage(role="assistant", content=text[:half]), delta=text[:half]
                )
            yield ChatResponse(message=reply, delta=text[half:])

        return chunks()

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise NotImplementedError("the agents under test only chat")

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise NotImplementedError("the agents under test only chat")

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError("the agents under test only chat")

    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> Any:
        raise NotImplementedError("the agents under test only chat")

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(
                ChatMessage(role="user", content=user_msg) if isinstance(user_msg, str) else user_msg
            )
        return {"messages": messages}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """Arguments given as text are read as llama-index's OpenAI LLM reads them: partial JSON,
        so a call cut off at ``max_tokens`` runs with what had arrived."""
        return [
            ToolSelection(
                tool_id=b.tool_call_id or "",
                tool_name=b.tool_name,
                tool_kwargs=b.tool_kwargs
                if isinstance(b.tool_kwargs, dict)
                else parse_partial_json(b.tool_kwargs),
            )
            for b in response.message.blocks
            if isinstance(b, ToolCallBlock)
        ]


@pytest.fixture
def recording_llm():
    def make(*replies: ChatMessage, function_calling: bool = True) -> RecordingLLM:
        return RecordingLLM(script=list(replies), function_calling=function_calling)

    return make
