"""DAMC as LangChain v1 agent middleware for ``langchain.agents.create_agent``.

Each model call gets DAMC's context through ``request.override`` (per call: the agent's state, and
so its stored history, is never edited). Tool results are recorded as soon as a tool returns (the
results of parallel calls once all are back, in the calls' order), and a tool's exception, which
ends the run, as its call's error result; the run's input before other middleware change it, and
what it ends with.
With a checkpointer, each ``thread_id`` is its own session of the memory's user.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple, cast

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain.agents.middleware.types import ToolCallRequest
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage, ToolCall, ToolMessage

from damc_core import DecisionMemory, checked_budget

from ._recorder import (
    MessageRecorder,
    bubbles_up,
    conversations_of,
    error_result,
    state_messages,
    to_messages,
)
from .recall import offers_recall, tool_answered_by, tool_name

logger = logging.getLogger("damc.langchain")
_GROUP_START_WAIT = 0.25
"""Seconds a call that raised waits for the parallel calls beside it to start (see
``MessageRecorder.wait_for_group``)."""


class _Step(NamedTuple):
    """Where a tool call's result goes: its conversation's recorder, the ids of the calls made
    with it (in order) and its place among them."""

    recorder: MessageRecorder
    calls: list[str]
    place: int | None
    retry: str | None = None
    """The id a call made again after its error result is recorded under."""


class DamcMiddleware(AgentMiddleware):
    """Sends the model DAMC's assembled context instead of the whole message history.

    >>> agent = create_agent(model, tools, middleware=[DamcMiddleware(DecisionMemory())])

    Runs without a ``thread_id`` use ``memory``; a checkpointed thread uses
    ``memory_for(thread_id)``, a session of the same user and store, so one agent serving many
    users' threads never shows one thread's records to another.

    The agent also gets the ``recall`` tool (``damc_core.RECALL_TOOL``): a card that leaves
    something out says so, and the model can read the raw record behind it, from its own thread's
    session. ``recall=False`` leaves the agent's tools as they are.

    List it before middleware that rewrite tool results (``HumanInTheLoopMiddleware`` notes an
    edited call in its result) or retry a call (``ToolRetryMiddleware``): a result is recorded as
    the wrappers listed after DAMC return it, and an exception they let through as the call's
    error result. List it after middleware that set the system prompt (``@dynamic_prompt``):
    DAMC adds its memory section to the prompt it is given, and a prompt set after that replaces
    the section.
    """

    def __init__(self, memory: DecisionMemory, *, budget: int | None = None, recall: bool = True) -> None:
        super().__init__()
        self.memory = memory
        self.budget = checked_budget(budget)
        self.conversations = conversations_of(memory)
        self.tools = [tool_answered_by(lambda: self.conversations.current().memory)] if recall else []
        self._shadow_noted = False
        self._retry_noted = False
        self._failed_requests = weakref.WeakValueDictionary[int, ToolCallRequest]()
        """The requests whose tool raised, by object id: a middleware retrying a call hands DAMC the
        same request again, a run resumed after the error a new one."""

    def memory_for(self, thread_id: str | None) -> DecisionMemory:
        """The memory of one checkpointer thread (``None``: runs without a thread id)."""
        return self.conversations.recorder_for(thread_id).memory

    # -- the run -----------------------------------------------------------------------------
    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Hold the run's input as it comes, recorded with the state's messages from the model
        call on: a message another middleware edits before the model sees it (``PIIMiddleware``
        redacting the user's input) is remembered as edited, and one it takes out of the state (a
        summary replacing turns of an imported history DAMC has not seen yet) as it came."""
        try:
            messages = state_messages(state)
            recorder = self.conversations.current()
            recorder.edited(messages)
            recorder.held_input = messages[: _answerable(messages)]
        except Exception:
            logger.exception("damc: reading the run's input failed; the agent goes on")
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        # opening a thread's recorder reads its stored events: off the event loop
        return await asyncio.to_thread(self.before_agent, state, runtime)

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        """Record what the run ends with but no model call or tool saw: the final answer, and
        the messages a middleware that ends the run (a call limit) adds. A reply is recorded here,
        or as its calls' tools start, not as the model returns it: a hook that edits it (a redaction
        of the output) runs after DAMC's when listed before it, and the state holds it edited."""
        self._catch_up(state)
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        await asyncio.to_thread(self._catch_up, state)
        return None

    def _catch_up(self, state: Any) -> None:
        try:
            self._observe_answerable(self.conversations.current(), state)
        except Exception:
            logger.exception("damc: recording the agent state failed; the agent goes on")

    def _record_held_input(self, recorder: MessageRecorder, state: Any) -> None:
        """Record the run's input ``before_agent`` held, as ``state`` now holds it."""
        if recorder.held_input is not None:
            self._observe_answerable(recorder, state)

    @staticmethod
    def _observe_answerable(recorder: MessageRecorder, state: Any) -> None:
        """Record the state's messages a model could answer now, the held input among them."""
        messages = state_messages(state)
        recorder.observe(_with_held_input(recorder, messages[: _answerable(messages)]))

    # -- model calls -------------------------------------------------------------------------
    def wrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]
    ) -> ModelResponse:
        return handler(self._with_memory(request))

    async def awrap_model_call(
        self, request: ModelRequest, handler: Callable[[ModelRequest], Awaitable[ModelResponse]]
    ) -> ModelResponse:
        # recording and building read the store: off the event loop, so other runs go on meanwhile
        return await handler(await asyncio.to_thread(self._with_memory, request))

    # -- tool calls --------------------------------------------------------------------------
    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        step = self._tool_started(request)
        try:
            result = handler(request)
        except BaseException as error:
            if step is not None:  # the calls beside it run in threads that may not have started yet
                step.recorder.wait_for_group(step.calls, _GROUP_START_WAIT)
            self._tool_failed(step, request, error)
            raise
        self._record(step, request, result)
        return result

    async def awrap_tool_call(
        self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        if not self.conversations.is_open():
            # a run that starts at its tools (resumed after an interrupt by a new process): the
            # thread's stored events are read off the loop
            await asyncio.to_thread(self.conversations.current)
        # on the loop, with no await before it once the recorder is open: a call is known to run
        # as soon as its task does
        step = self._tool_started(request)
        try:
            result = await handler(request)
        except asyncio.CancelledError as error:  # the run ended while it ran (another call raised)
            self._tool_failed(step, request, error)  # on the loop: a cancelled task's next await is too
            raise
        except BaseException as error:
            await asyncio.to_thread(self._tool_failed, step, request, error)
            raise
        await asyncio.to_thread(self._record, step, request, result)
        return result

    def _tool_started(self, request: ToolCallRequest) -> _Step | None:
        """Where the call's result goes, its recorder told that the call runs."""
        try:
            recorder = self.conversations.current()
            calls, place = _calls_beside(state_messages(request.state), request.tool_call)
            call_id = str(request.tool_call.get("id"))
            recorder.tool_started(calls, place if place is not None else call_id)
            retried = recorder.retry_of(call_id)
        except Exception:
            logger.exception("damc: opening the thread's memory failed; the agent goes on")
            return None
        if retried is None:
            return _Step(recorder, calls, place)
        if not self._retry_noted and self._failed_requests.get(id(request)) is request:
            self._retry_noted = True
            logger.warning(
                "damc: a tool call DAMC recorded as failed was made again: DamcMiddleware is listed after "
                "a middleware that retries tool calls (ToolRetryMiddleware); list DamcMiddleware first"
            )
        return _Step(recorder, calls, place, f"{call_id}~retry{retried}")

    def _tool_failed(self, step: _Step | None, request: ToolCallRequest, error: BaseException) -> None:
        """Record ``error`` as the call's result (not langgraph's pause, which the call answers on
        resume), and the results of the calls beside it once back: the exception ends the run."""
        if step is None:
            return
        try:
            if not bubbles_up(error):
                self._failed_requests[id(request)] = request
                call_id = str(request.tool_call.get("id"))
                failed = ToolMessage(error_result(error), tool_call_id=call_id, status="error")
                self._answer(step, request, failed)
                step.recorder.answered_with_error(call_id)
            step.recorder.tool_failed(step.calls)
            step.recorder.tool_stopped(step.calls)
        except Exception:
            logger.exception("damc: recording the results of a failed step failed; the agent goes on")

    def _record(self, step: _Step | None, request: ToolCallRequest, result: Any) -> None:
        if step is not None:
            self._answer(step, request, result)
            step.recorder.tool_stopped(step.calls)

    def _answer(self, step: _Step, request: ToolCallRequest, result: Any) -> None:
        """Record the call's result, after the assistant message that made the call, so the result
        pairs with it."""
        try:
            self._record_held_input(step.recorder, request.state)
            step.recorder.observe(state_messages(request.state))
        except Exception:
            logger.exception("damc: recording the agent state failed; the agent goes on")
        if step.retry is not None:  # made again after its error result: a call of its own
            step.recorder.record_retry(step.calls, request.tool_call, step.retry, result)
        else:
            step.recorder.record_tool_result(result, calls=step.calls, place=step.place)

    def _note_shadowed_recall(self, tools: Any) -> None:
        """Say once when the agent's own tool named ``recall`` stands in for DAMC's: the memory
        section tells the model to recall cards by id, and that tool would get the ids."""
        if not self.tools or self._shadow_noted:
            return
        ours = self.tools[0]
        for tool in tools or ():
            if tool_name(tool) == ours.name and tool is not ours:
                self._shadow_noted = True
                logger.warning(
                    "damc: the agent has a tool of its own named %r, which the model is given instead of "
                    "DAMC's; rename it, or pass recall=False to DamcMiddleware",
                    ours.name,
                )
                return

    # -- translation -------------------------------------------------------------------------
    def _with_memory(self, request: ModelRequest) -> ModelRequest:
        """The same request with DAMC's messages; the request is left as it was on any failure."""
        try:
            self._note_shadowed_recall(request.tools)
            recall = offers_recall(request.tools)
            conversation, leading, trailing = split_per_call(request)
            recorder = self.conversations.current()
            self._record_held_input(recorder, request.state)
            recorder.forked(conversation)
            recorder.observe(conversation)
            prompt = request.system_message
            if prompt is None and conversation and _has_blocks(conversation[0]):
                # a system prompt in content blocks among the messages (cache control): kept as
                # it is, with the memory section as one more block, not read as its text
                prompt = cast(SystemMessage, conversation[0])
                built = recorder.memory.build(system="", budget=self.budget, recall_tool=recall)
            else:
                built = recorder.memory.build(budget=self.budget, recall_tool=recall)
            system, dialogue = split_system(built.messages)
            messages = [*leading, *to_messages(dialogue), *trailing]
        except Exception:  # the agent must keep running without memory rather than fail
            logger.exception("damc: building the context failed; sending the request unchanged")
            return request
        return request.override(
            messages=messages,  # type: ignore[arg-type]
            system_message=with_memory_section(prompt, system),
        )


def split_per_call(request: ModelRequest) -> tuple[list[AnyMessage], list[AnyMessage], list[AnyMessage]]:
    """The request's messages as (the conversation, per-call messages before it, the others).

    The conversation is what the agent's state holds, known by message id (a middleware listed
    before DAMC may copy messages to edit them), plus the error results LangChain adds for
    malformed calls. A message another middleware adds for this call only (a reminder, retrieved
    context) is sent where it was, before or after DAMC's dialogue, but is not recorded: it would
    come back as a new user turn at every call. An assistant message such a middleware rebuilt
    without its id (to drop reasoning blocks) is the state's message it was made from."""
    state = request.state if isinstance(request.state, dict) else {}
    held = state.get("messages")
    if not isinstance(held, list):
        return list(request.messages), [], []
    ids = {m.id for m in held if getattr(m, "id", None)}
    objects = {id(m) for m in held}
    conversation: list[AnyMessage] = []
    leading: list[AnyMessage] = []
    trailing: list[AnyMessage] = []
    for message in request.messages:
        if isinstance(message, ToolMessage) or id(message) in objects or (message.id and message.id in ids):
            conversation.append(message)
        elif (original := _rebuilt_from(message, held)) is not None:
            conversation.append(original)
        else:
            (trailing if conversation else leading).append(message)
    return conversation, leading, trailing


def _rebuilt_from(message: AnyMessage, held: list[AnyMessage]) -> AIMessage | None:
    """The state's assistant message that ``message``, an assistant message without a known id,
    was rebuilt from: the one making the same calls, or without calls, saying the same text."""
    if not isinstance(message, AIMessage):
        return None
    calls = [call.get("id") for call in message.tool_calls]
    for original in held:
        if not isinstance(original, AIMessage):
            continue
        if calls and [call.get("id") for call in original.tool_calls] == calls:
            return original
        if not calls and not original.tool_calls and message.text and original.text == message.text:
            return original
    return None


def _has_blocks(message: AnyMessage) -> bool:
    """Whether ``message`` is a system prompt given as content blocks."""
    return isinstance(message, SystemMessage) and isinstance(message.content, list)


def _calls_beside(messages: Any, tool_call: ToolCall) -> tuple[list[str], int | None]:
    """The ids of the calls the assistant message that made ``tool_call`` made, in its order, and
    the call's position among them (by its id, name and arguments: some servers give parallel
    calls of one tool the same id)."""
    call_id = tool_call.get("id")
    for message in reversed(messages or ()):
        if isinstance(message, AIMessage) and any(call.get("id") == call_id for call in message.tool_calls):
            calls = message.tool_calls
            place = next(
                (
                    i
                    for i, call in enumerate(calls)
                    if call is tool_call
                    or (call.get("id"), call.get("name"), call.get("args"))
                    == (call_id, tool_call.get("name"), tool_call.get("args"))
                ),
                None,
            )
            return [str(call.get("id")) for call in calls], place
    return [], None


def _with_held_input(recorder: MessageRecorder, messages: list[AnyMessage]) -> list[BaseMessage]:
    """``messages``, the state's, after the run's input the recorder held (which it holds no
    more): each input message as the state now holds it, or as it came if the state no longer
    holds it."""
    held, recorder.held_input = recorder.held_input, None
    if not held:
        return list(messages)
    now = {m.id: m for m in messages if m.id}
    input_ids = {m.id for m in held if m.id}
    return [
        *((now.get(m.id, m) if m.id else m) for m in held),
        *(m for m in messages if not (m.id and m.id in input_ids)),
    ]


def _answerable(messages: list[AnyMessage]) -> int:
    """How many of the state's messages can be recorded now: up to a call whose arguments did not
    parse and that nothing answered yet; the model call adds LangChain's error result right after
    it, and the rest follow that."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    for index, message in enumerate(messages):
        if isinstance(message, AIMessage) and any(
            call.get("id") not in answered for call in message.invalid_tool_calls
        ):
            return index + 1
    return len(messages)


def with_memory_section(prompt: SystemMessage | None, memory: str | None) -> SystemMessage | None:
    """The agent's system prompt followed by the memory section. A prompt given as content blocks
    (cache control, images) keeps its blocks, and the section comes as one more text block."""
    if not memory:
        return prompt
    if prompt is None or not prompt.content:
        return SystemMessage(memory)
    if isinstance(prompt.content, str):
        return SystemMessage(f"{prompt.content}\n\n{memory}")
    return SystemMessage([*prompt.content, {"type": "text", "text": memory}])


def split_system(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    if messages and messages[0].get("role") == "system":
        return str(messages[0].get("content") or ""), messages[1:]
    return None, messages
