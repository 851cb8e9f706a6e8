"""``DamcLLM``: the user's LLM, with DAMC's context assembled for every call.

A workflow agent sends its model ``[system, *memory.aget(), *scratchpad]``: the tool results of the
running task never pass through memory, so only a wrapper around the model can compress them.
Function-calling input (``FunctionAgent``) is replaced as a whole by DAMC's context (system prompt
and memory section, then the recent dialogue). ReAct input keeps its header and its scratchpad of
``Thought / Action / Observation`` turns, with each observation replaced by its memory card when
that is shorter; the history before it comes from DAMC. Tool-call parsing, metadata, and prompts a
caller formats itself (``predict``, structured output, completions) are the wrapped model's own.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Generator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    ContentBlock,
    LLMMetadata,
    MessageRole,
    TextBlock,
)
from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import LLM, ToolSelection
from llama_index.core.prompts import BasePromptTemplate, PromptTemplate
from llama_index.core.tools import BaseTool
from llama_index.core.types import Model, TokenAsyncGen, TokenGen

from damc_core import RECALL_TOOL, DecisionMemory

from ._recorder import Recorder, args_key, message_text, parse_react, recorder_for
from .recall import lists_recall, offers_recall

if TYPE_CHECKING:
    from llama_index.core.chat_engine.types import AgentChatResponse
    from llama_index.core.program.utils import FlexibleModel

logger = logging.getLogger("damc.llamaindex")


@dataclass(slots=True)
class Predicting:
    """A ``DamcLLM.predict_and_call`` under way. No agent step reports the calls it makes: the
    model's reply is noted here, and each tool's own span records its output under the id the
    model gave the call (see ``capture``)."""

    recorder: Recorder
    calls: list[ToolSelection] = field(default_factory=list)
    replied: bool = False

    def call_id(self, name: str, arguments: Mapping[str, Any]) -> str | None:
        """The id of the call of ``name`` that ran with ``arguments`` (else the first of ``name``:
        a tool adds its partial parameters), taken so that the next call of it gets the next id."""
        key = args_key(arguments)
        same_name = [call for call in self.calls if call.tool_name == name]
        call = next((c for c in same_name if args_key(c.tool_kwargs) == key), None) or next(
            iter(same_name), None
        )
        if call is None:
            return None
        self.calls.remove(call)
        return call.tool_id or None


PREDICTING: ContextVar[Predicting | None] = ContextVar("damc_predicting", default=None)
"""The ``predict_and_call`` of a ``DamcLLM`` running in this context, if any."""


class DamcLLM(FunctionCallingLLM):
    """``FunctionAgent(llm=DamcLLM(llm=my_llm, memory=DecisionMemory(...)), tools=...)``."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    llm: LLM = Field(description="The model that answers.")
    memory: DecisionMemory = Field(description="The DAMC memory that assembles each call's context.")
    budget: int | None = Field(
        default=None, gt=0, description="Token budget per call; the memory's own when None."
    )
    _recorder: Recorder = PrivateAttr()

    def model_post_init(self, context: Any, /) -> None:
        from .capture import follow_damc_runs  # capture imports this module

        self._recorder = recorder_for(self.memory)
        follow_damc_runs()

    @classmethod
    def class_name(cls) -> str:
        return "DamcLLM"

    @property
    def metadata(self) -> LLMMetadata:
        return self.llm.metadata

    # -- context -----------------------------------------------------------------------------
    def context(self, messages: Sequence[ChatMessage], *, recall_tool: bool = False) -> list[ChatMessage]:
        """What the wrapped model receives instead of ``messages``; ``messages`` themselves on any
        failure, so the agent never stops because of DAMC. ``recall_tool``: the model is given the
        ``recall`` tool with them (see ``DecisionMemory.build``); a ReAct prompt that describes it
        says so by itself."""
        try:
            return self._context(list(messages), recall_tool)
        except Exception:
            logger.exception("damc: assembling the context failed; the model gets the input unchanged")
            return list(messages)

    def _context(self, messages: list[ChatMessage], recall_tool: bool) -> list[ChatMessage]:
        produced = self._recorder.produced_ids()
        head = 0
        while head < len(messages) and _is_prompt(messages[head], produced):
            head += 1
        recall_tool = recall_tool or any(lists_recall(message_text(m)) for m in messages[:head])
        rest = messages[head:]
        closing: list[ChatMessage] = []  # an instruction the agent appends for this call only
        while rest and rest[-1].role == MessageRole.SYSTEM:  # ("You have reached the maximum ...")
            closing.insert(0, rest.pop())
        start = _react_tail(rest, produced)
        history, retry = _without_retry(rest[:start])
        history, blocks = _without_memory_blocks(history, produced)
        # a system note the app put in the history between runs goes with the system prompt; a
        # memory section DAMC rendered as a system message (DamcMemory(section_role="system")) is
        # built again below
        notes = [
            m
            for m in history
            if m.role in (MessageRole.SYSTEM, MessageRole.DEVELOPER) and id(m) not in produced
        ]
        system = "\n\n".join(message_text(m) for m in (*messages[:head], *notes)) or None
        self._recorder.observe_view(history)
        tail = rest[start:]
        cards = self._recorder.record_react_tail(tail) if tail else {}
        # the scratchpad is sent as it is, so its cards are left out; the history is not sent (the
        # built context replaces it), so its cards stay in, handed over to a memory or not
        exclude = self._recorder.pending - self._recorder.cards_of(history) if tail else set()
        built = self.memory.build(system=system, budget=self.budget, exclude=exclude, recall_tool=recall_tool)
        # a DamcMemoryBlock's section, in the system prompt or in Memory's blocks, shows cards of
        # this memory too: the ones this section would repeat make room for others
        shown = self._recorder.shown_in(
            [message_text(m) for m in (*messages[:head], *notes)]
            + [b.text for b in blocks if isinstance(b, TextBlock)]
        )
        repeated = {d.card_id for d in built.decisions if d.kept and d.tokens} & shown
        if repeated:
            built = self.memory.build(
                system=system, budget=self.budget, exclude=exclude | repeated, recall_tool=recall_tool
            )
        converted = _with_memory_blocks(self._recorder.to_chat_messages(built.messages), blocks)
        for index, card in cards.items():
            # a recall's observation is the record the model asked for whole: its card would cut
            # it again, and the model would recall it again
            if card.tokens < card.raw_tokens and card.tool_name != RECALL_TOOL["function"]["name"]:
                tail[index] = ChatMessage(role=tail[index].role, content=f"Observation: {card.summary}")
        return [*converted, *retry, *tail, *closing]

    def _with_tools_input(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None,
        chat_history: list[ChatMessage] | None,
    ) -> list[ChatMessage]:
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
        if user_msg is not None:
            messages.append(user_msg)
        return self.context(messages, recall_tool=offers_recall(tools))

    # -- chat --------------------------------------------------------------------------------
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self.llm.chat(self.context(messages), **kwargs)

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return await self.llm.achat(self.context(messages), **kwargs)

    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self.llm.stream_chat(self.context(messages), **kwargs)

    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        return await self.llm.astream_chat(self.context(messages), **kwargs)

    # -- chat with tools ---------------------------------------------------------------------
    def chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        return self._function_calling().chat_with_tools(
            tools,
            chat_history=self._with_tools_input(tools, user_msg, chat_history),
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    async def achat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        return await self._function_calling().achat_with_tools(
            tools,
            chat_history=self._with_tools_input(tools, user_msg, chat_history),
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def stream_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponseGen:
        return self._function_calling().stream_chat_with_tools(
            tools,
            chat_history=self._with_tools_input(tools, user_msg, chat_history),
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    async def astream_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> ChatResponseAsyncGen:
        return await self._function_calling().astream_chat_with_tools(
            tools,
            chat_history=self._with_tools_input(tools, user_msg, chat_history),
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return self._function_calling()._prepare_chat_with_tools(
            tools,
            user_msg=user_msg,
            chat_history=chat_history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            tool_required=tool_required,
            **kwargs,
        )

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = self._function_calling().get_tool_calls_from_response(
            response, error_on_no_tool_call=error_on_no_tool_call, **kwargs
        )
        predicting = PREDICTING.get()
        if predicting is not None and predicting.recorder is self._recorder and not predicting.replied:
            predicting.replied = True  # the reply predict_and_call acts on
            predicting.calls = list(calls)
            if calls:
                self._recorder.expect_calls(response.message, calls)
            else:  # its text is predict_and_call's answer
                self._recorder.record_answer(response.message)
        return calls

    # -- predict and call (no agent step reports the calls: they are recorded here) ---------
    def predict_and_call(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        error_on_no_tool_call: bool = True,
        error_on_tool_error: bool = False,
        **kwargs: Any,
    ) -> AgentChatResponse:
        with self._predicting():
            return super().predict_and_call(
                tools,
                user_msg=user_msg,
                chat_history=chat_history,
                verbose=verbose,
                allow_parallel_tool_calls=allow_parallel_tool_calls,
                error_on_no_tool_call=error_on_no_tool_call,
                error_on_tool_error=error_on_tool_error,
                **kwargs,
            )

    async def apredict_and_call(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        error_on_no_tool_call: bool = True,
        error_on_tool_error: bool = False,
        **kwargs: Any,
    ) -> AgentChatResponse:
        with self._predicting():
            return await super().apredict_and_call(
                tools,
                user_msg=user_msg,
                chat_history=chat_history,
                verbose=verbose,
                allow_parallel_tool_calls=allow_parallel_tool_calls,
                error_on_no_tool_call=error_on_no_tool_call,
                error_on_tool_error=error_on_tool_error,
                **kwargs,
            )

    @contextmanager
    def _predicting(self) -> Iterator[None]:
        """While a ``predict_and_call`` of this model runs: the replies and tool outputs it makes
        are recorded here (see ``Predicting``), as no agent step reports them."""
        token = PREDICTING.set(Predicting(self._recorder))
        try:
            yield
        finally:
            PREDICTING.reset(token)

    def _function_calling(self) -> FunctionCallingLLM:
        if not isinstance(self.llm, FunctionCallingLLM):
            raise TypeError(
                f"{type(self.llm).__name__} is not a FunctionCallingLLM, so it cannot call tools; "
                "use it with ReActAgent, or wrap a function-calling model"
            )
        return self.llm

    # -- prompts the caller formatted (predictions, structured output): passed through -------
    # ``FunctionAgent(output_cls=...)`` asks for its structured answer with a prompt that already
    # holds the conversation, and a query engine on the agent's model (a ``QueryEngineTool``) asks
    # with its own question and context: taken for a new turn, such a prompt was recorded as the
    # user's message and sent after DAMC's context.
    def predict(self, prompt: BasePromptTemplate, **prompt_args: Any) -> str:
        return self.llm.predict(prompt, **prompt_args)

    async def apredict(self, prompt: BasePromptTemplate, **prompt_args: Any) -> str:
        return await self.llm.apredict(prompt, **prompt_args)

    def stream(self, prompt: BasePromptTemplate, **prompt_args: Any) -> TokenGen:
        return self.llm.stream(prompt, **prompt_args)

    async def astream(self, prompt: BasePromptTemplate, **prompt_args: Any) -> TokenAsyncGen:
        return await self.llm.astream(prompt, **prompt_args)

    def structured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        return cast(Model, self.llm.structured_predict(output_cls, prompt, llm_kwargs, **prompt_args))

    async def astructured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        return cast(Model, await self.llm.astructured_predict(output_cls, prompt, llm_kwargs, **prompt_args))

    def stream_structured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Generator[Model | FlexibleModel, None, None]:
        return self.llm.stream_structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)

    async def astream_structured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> AsyncGenerator[Model | FlexibleModel, None]:
        return await self.llm.astream_structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)

    # -- completion (prompts are single strings: passed through) -----------------------------
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self.llm.complete(prompt, formatted=formatted, **kwargs)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return await self.llm.acomplete(prompt, formatted=formatted, **kwargs)

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        return self.llm.stream_complete(prompt, formatted=formatted, **kwargs)

    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        return await self.llm.astream_complete(prompt, formatted=formatted, **kwargs)


RETRY_PROMPTS = ("Error while parsing the output:", "FAILURE: Your previous response was empty.")
"""How ReActAgent's correction of a reply it could not parse begins."""
RETRY_FORMAT = "Thought: <"
"""What the correction always holds: the format the reply should have had."""


def _without_retry(messages: list[ChatMessage]) -> tuple[list[ChatMessage], list[ChatMessage]]:
    """The history without the retry a ReAct agent adds at its end for one call: the reply it
    could not parse and its correction (a user turn only in form), after the user's message said
    again. They are sent, not recorded: the agent's own memory never holds them, and the
    correction is no request of the user's."""
    if len(messages) < 2:
        return messages, []
    reply, correction = messages[-2:]
    text = message_text(correction)
    if not (
        reply.role == MessageRole.ASSISTANT
        and correction.role == MessageRole.USER
        and text.startswith(RETRY_PROMPTS)
        and RETRY_FORMAT in text
    ):
        return messages, []
    kept, retry = messages[:-2], messages[-2:]
    said = kept[-1:]  # the user's message, said again before the retry
    if said and said[0].role == MessageRole.USER and any(_same_turn(said[0], m) for m in kept[:-1]):
        kept, retry = kept[:-1], [*said, *retry]
    return kept, retry


def _without_memory_blocks(
    messages: list[ChatMessage], produced: set[int]
) -> tuple[list[ChatMessage], list[ContentBlock]]:
    """The history without the text llama-index's ``Memory`` renders its blocks into for one call
    (``<memory>...</memory>`` at the start of the newest user turn with ``InsertMethod.USER``, or
    a user turn of its own), and that text: it is sent, not recorded; the user said only the rest."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role != MessageRole.USER or id(message) in produced:
            continue
        blocks = list(message.blocks)
        if not (
            blocks and isinstance(blocks[0], TextBlock) and blocks[0].text.lstrip().startswith("<memory>")
        ):
            return messages, []
        end = next(
            (i for i, b in enumerate(blocks) if isinstance(b, TextBlock) and "</memory>" in b.text), None
        )
        if end is None:
            return messages, []
        said = blocks[end + 1 :]
        rest = [message.model_copy(update={"blocks": said})] if said else []
        return [*messages[:index], *rest, *messages[index + 1 :]], blocks[: end + 1]
    return messages, []


def _with_memory_blocks(messages: list[ChatMessage], blocks: list[ContentBlock]) -> list[ChatMessage]:
    """``messages`` with ``Memory``'s rendered blocks where it put them: before the newest user
    turn's own, or as a user turn at the end when there is none."""
    if not blocks:
        return messages
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == MessageRole.USER:
            turn = messages[index].model_copy(update={"blocks": [*blocks, *messages[index].blocks]})
            return [*messages[:index], turn, *messages[index + 1 :]]
    return [*messages, ChatMessage(role=MessageRole.USER, blocks=blocks)]


def _same_turn(a: ChatMessage, b: ChatMessage) -> bool:
    return a.role == b.role and message_text(a) == message_text(b)


def _react_tail(messages: list[ChatMessage], produced: set[int]) -> int:
    """Where the trailing ReAct scratchpad (assistant actions, ``Observation:`` turns) starts;
    messages DAMC produced (the history it rendered) end the search."""
    start = len(messages)
    while start > 0:
        message = messages[start - 1]
        if id(message) in produced:
            break
        text = message_text(message)
        if message.role == MessageRole.ASSISTANT:
            steps = parse_react(text)
            if not steps or steps[-1].kind != "action":
                break
        elif not text.startswith("Observation:"):
            break
        start -= 1
    return start


def _is_prompt(message: ChatMessage, produced: set[int]) -> bool:
    """A leading system message of the agent's own (not one DAMC rendered)."""
    return message.role == MessageRole.SYSTEM and id(message) not in produced
