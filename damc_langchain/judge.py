"""``ChatModelJudge``: a LangChain chat model as the judge of ``LLMJudgeValuator``."""

from __future__ import annotations

import contextvars
import threading
from concurrent import futures
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import Runnable

from damc_core.checks import finite_number
from damc_core.errors import ConfigError


class ChatModelJudge:
    """Sends the judge prompt as one human message and returns the reply's text.

    The model may be a chat model, a wrapped one, or a runnable that answers with text (a text
    completion model, ``model | StrOutputParser()``). ``timeout``: seconds a rating may take before
    the card keeps the judge's default; ``None`` waits as long as the model does (``ChatOpenAI``'s
    own default: 10 minutes a try), holding the agent's step that long on a server that stopped
    answering. A rating past it is left to finish in the background, its reply unused."""

    def __init__(self, model: BaseChatModel | Runnable[Any, Any], *, timeout: float | None = 120.0) -> None:
        if not callable(getattr(model, "invoke", None)):  # else every rating fails, logged at each build
            raise ConfigError(f"ChatModelJudge needs a chat model or a runnable, got {model!r}")
        if timeout is not None and not (finite_number(timeout) and timeout > 0):
            raise ConfigError(f"timeout must be > 0 seconds (or None for the model's own), got {timeout!r}")
        self.model = model
        self.timeout = timeout

    @property
    def name(self) -> str:
        # a wrapped model (``model.with_retry()``) is a Runnable without ``_llm_type``
        return f"langchain:{getattr(self.model, '_llm_type', type(self.model).__name__)}"

    def complete(self, prompt: str) -> str:
        if self.timeout is None:
            return self._ask(prompt)
        reply: futures.Future[str] = futures.Future()
        context = contextvars.copy_context()  # the running graph's config and callbacks go along

        def ask() -> None:
            try:
                reply.set_result(context.run(self._ask, prompt))
            except BaseException as exc:  # given to the caller, which logs it and keeps the default
                reply.set_exception(exc)

        # a daemon thread: a model that never answers must not keep the process from exiting either
        threading.Thread(target=ask, name="damc-judge", daemon=True).start()
        try:
            return reply.result(timeout=self.timeout)
        except futures.TimeoutError:  # TimeoutError itself from Python 3.11
            raise TimeoutError(f"{self.name} gave no rating within {self.timeout} s") from None

    def _ask(self, prompt: str) -> str:
        # a rating made while a graph runs is DAMC's, not the agent's answer: langgraph's
        # ``stream_mode="messages"`` leaves out the calls tagged ``nostream`` (TAG_NOSTREAM)
        reply = self.model.invoke([HumanMessage(content=prompt)], config={"tags": ["nostream"]})
        if isinstance(reply, str):
            return reply
        text = str(reply.text)
        if not text.strip() and _cut_at_limit(getattr(reply, "response_metadata", {})):
            # a reasoning model spent the limit thinking; so would it on every card
            raise ValueError(
                "the reply was cut at the model's token limit before any text; give it more room"
            )
        return text


def _cut_at_limit(metadata: dict[str, Any]) -> bool:
    """Whether a reply stopped at its token limit, as OpenAI's, Gemini's or Anthropic's models say."""
    return (
        metadata.get("finish_reason") in ("length", "MAX_TOKENS")
        or metadata.get("stop_reason") == "max_tokens"
    )
