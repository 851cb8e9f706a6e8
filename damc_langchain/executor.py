"""``wrap(agent_executor, memory)``: the same langchain-classic executor, with DAMC before its model."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from langchain_classic.agents import AgentExecutor
from langchain_classic.agents.format_scratchpad.tools import format_to_tool_messages
from langchain_classic.agents.output_parsers.openai_tools import OpenAIToolsAgentOutputParser
from langchain_classic.agents.output_parsers.tools import ToolAgentAction, ToolsAgentOutputParser
from langchain_classic.agents.tools import InvalidTool
from langchain_core.agents import AgentAction, AgentFinish
from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager, Callbacks
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableBinding, RunnableLambda, RunnableSequence
from langchain_core.tools import BaseTool
from pydantic import BaseModel

from damc_core import DecisionMemory, checked_budget

from ._recorder import MessageRecorder, announcement, bubbles_up, error_result, to_event, to_messages
from .middleware import split_system, with_memory_section
from .recall import offers_recall

logger = logging.getLogger("damc.langchain")


def wrap(executor: AgentExecutor, memory: DecisionMemory, *, budget: int | None = None) -> AgentExecutor:
    """A copy of ``executor`` whose model sees DAMC's context at every step; ``executor`` is unchanged.

    The step sits between the agent's prompt and its chat model, so the intermediate steps of the
    current run (the scratchpad) are compressed too, and earlier runs, final answers included,
    reach the model as memory cards. Works for tool-calling agents built as ``prompt | model |
    parser`` sequences, which is what ``create_tool_calling_agent`` and
    ``create_openai_tools_agent`` build; text agents (``create_react_agent`` and the like) resend
    their scratchpad as one growing prompt text, which DAMC would record again at every step.

    The copy holds one conversation, ``memory``'s session: run it one input at a time (``batch``
    would interleave its runs in one memory); wrap once per conversation with
    ``memory.for_session(conversation_id)`` for several.

    A step's tool calls are recorded as the model makes them and its results as the tools return
    (the copy's tools are copies that report their runs); a tool that raises, or an interrupt,
    leaves the step in memory up to there, the call it stopped at with its error as the result.
    An error a tool's ``handle_tool_error`` or ``handle_validation_error`` turns into its output is
    recorded as the call's error result.
    """
    checked_budget(budget)
    agent = executor.agent
    runnable = getattr(agent, "runnable", None)
    if (
        not isinstance(runnable, RunnableSequence)
        or not isinstance(agent, BaseModel)
        or not isinstance(runnable.last, (ToolsAgentOutputParser, OpenAIToolsAgentOutputParser))
    ):
        raise TypeError(
            f"wrap() needs a tool-calling agent built as a runnable sequence (prompt | model | tool "
            f"calls parser), got {_describe(agent)}; use DamcCallbackHandler or DAMCMemory instead"
        )
    steps = list(runnable.steps)
    index = next((i for i, step in enumerate(steps) if _is_chat_model(step)), None)
    if index is None:
        raise TypeError("wrap() found no chat model in the agent's runnable sequence")
    tool_names = [tool.name for tool in executor.tools]
    context = _DamcStep(memory, budget, recall_tool=offers_recall(executor.tools), tools=tool_names)
    damc = RunnableLambda(context, name="damc_context")
    calls = RunnableLambda(context.record_calls, name="damc_calls")
    sequence: RunnableSequence[Any, Any] = RunnableSequence(*steps[:index], damc, *steps[index:], calls)
    tools = [_reporting_copy(tool, context.tool_runs) for tool in executor.tools]
    return executor.model_copy(
        update={
            "agent": agent.model_copy(update={"runnable": sequence}),
            "tools": tools,
            "callbacks": _with_handler(executor.callbacks, _Answers(memory)),
        }
    )


def _reporting_copy(tool: BaseTool, runs: _ToolRuns) -> BaseTool:
    """A copy of ``tool`` that reports its runs to ``runs``, the errors it turns into its output
    (``handle_tool_error``, ``handle_validation_error``) included: the executor passes no call id,
    so the tool reports such an error as an ordinary output."""
    update: dict[str, Any] = {"callbacks": _with_handler(tool.callbacks, runs)}
    if tool.handle_tool_error:
        update["handle_tool_error"] = runs.handling(
            tool.handle_tool_error, lambda e: e.args[0] if e.args else "Tool execution error"
        )
    if tool.handle_validation_error:
        update["handle_validation_error"] = runs.handling(
            tool.handle_validation_error, lambda e: "Tool input validation error"
        )
    copy: BaseTool = tool.model_copy(update=update)
    return copy


def _with_handler(callbacks: Callbacks, handler: BaseCallbackHandler) -> Callbacks:
    """An owner's ``callbacks`` with ``handler``, which hears of the owner's own runs, not of those
    they start."""
    if isinstance(callbacks, BaseCallbackManager):
        manager: BaseCallbackManager = callbacks.copy()
        manager.add_handler(handler, inherit=False)
        return manager
    return [*(callbacks or ()), handler]


def _describe(agent: Any) -> str:
    runnable = getattr(agent, "runnable", None)
    if isinstance(runnable, RunnableSequence):
        return f"{type(agent).__name__} ending in {type(runnable.last).__name__}"
    return type(agent).__name__


def _is_chat_model(step: Any) -> bool:
    return isinstance(step, BaseChatModel) or (
        isinstance(step, RunnableBinding) and isinstance(step.bound, BaseChatModel)
    )


_HANDLED_KEPT = 64
"""Handled errors' outputs awaiting their runs' end; one a run never reported is forgotten."""
_RETRY_LOOKBACK = 64
"""Events looked back through for the request a failed run left unanswered."""


def _unanswered_request(memory: DecisionMemory) -> Any:
    """The content of the newest user turn if nothing answered it (its run failed), else None."""
    for event in reversed(memory.messages(since=max(0, memory.event_count - _RETRY_LOOKBACK))):
        if event.get("role") == "user":
            return event.get("content")
        if event.get("role") == "assistant" and not event.get("tool_calls"):
            return None
    return None


class _DamcStep:
    """Prompt value in, DAMC's message list out.

    A run is the prompt's last human turn and the scratchpad after it; one with no scratchpad yet
    starts a new run. Turns before it (a ``chat_history`` placeholder the caller fills) are the
    earlier runs DAMC recorded itself, and are recorded only when the memory is still empty: a
    history that reached the agent from elsewhere."""

    def __init__(
        self, memory: DecisionMemory, budget: int | None, *, recall_tool: bool, tools: list[str]
    ) -> None:
        self.memory = memory
        self.budget = budget
        self.recall_tool = recall_tool
        self.recorder = MessageRecorder(memory)
        self.tool_runs = _ToolRuns(self, tools)
        self.run: list[BaseMessage] = []
        """The messages of the running run the model was last given: the next prompt's run
        starts with them."""

    def __call__(self, prompt: PromptValue) -> list[BaseMessage]:
        messages = prompt.to_messages()
        system = messages[0] if messages and isinstance(messages[0], SystemMessage) else None
        dialogue = messages[1:] if system is not None else messages
        start = next(
            (i for i in range(len(dialogue) - 1, -1, -1) if isinstance(dialogue[i], HumanMessage)), 0
        )
        run = dialogue[start:]
        self.run = run
        try:
            if not any(isinstance(m, (AIMessage, ToolMessage)) for m in run):
                if self.memory.event_count == 0:
                    MessageRecorder(self.memory).observe(dialogue[:start])
                self.recorder = MessageRecorder(self.memory)  # a new run: positions start over
                if run and _unanswered_request(self.memory) == to_event(run[0]).get("content"):
                    self.recorder.assume_recorded(run[:1])  # a run retried after it failed
            self.recorder.observe(run)
            built = self.memory.build(budget=self.budget, recall_tool=self.recall_tool)
            memory_section, recent = split_system(built.messages)
            converted = to_messages(recent)
        except Exception:  # the agent keeps running on its own prompt rather than fail
            logger.exception("damc: building the context failed; the model gets the prompt unchanged")
            return messages
        head = with_memory_section(system, memory_section)
        return [head, *converted] if head is not None else converted

    def record_calls(self, decision: list[AgentAction] | AgentFinish) -> list[AgentAction] | AgentFinish:
        """A step's calls are recorded as the model makes them: they must be in memory before their
        tools run (one may end the run). A final answer is recorded by ``_Answers``."""
        try:
            if not isinstance(decision, AgentFinish):
                self.tool_runs.expect([a for a in decision if isinstance(a, ToolAgentAction)])
        except Exception:
            logger.exception("damc: recording the model's tool calls failed; the agent goes on")
        return decision

    def record_reply(self, reply: BaseMessage) -> bool:
        """Record the model's reply as it comes; whether it is recorded, so its results can follow
        it. A reply without an id is known by the place it takes in the next prompt's run, right
        after the run the model was given, unless the scratchpad leaves it out there as a message
        it already holds: it is recorded from the next prompt then. The run goes in first: a
        result the store refused as its tool returned (a file locked for a moment) precedes the
        call made after it, or the reply waits for it, recorded from the next prompt."""
        try:
            self.recorder.observe(self.run)
        except Exception as error:
            logger.warning(
                "damc: the model's reply waits for the step before it, not recorded yet: %s", error
            )
            return False
        if not reply.id:
            if reply in self.run:
                return False
            self.recorder.record_reply(reply, at=len(self.run))
        else:
            self.recorder.record_reply(reply)
        return True


class _Answers(BaseCallbackHandler):
    """Records the executor's output as the run's answer however the run ended: the model's
    answer, a ``return_direct`` tool's result, or the stop message of ``max_iterations`` or
    ``max_execution_time``. No later prompt holds it, and a request left without an answer is
    taken for a failed run's, which the same request next time retries."""

    def __init__(self, memory: DecisionMemory) -> None:
        self.memory = memory

    def on_agent_finish(
        self, finish: AgentFinish, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        try:
            self.memory.observe({"role": "assistant", "content": finish.return_values.get("output")})
        except Exception:
            logger.exception("damc: recording the run's answer failed; the agent goes on")


class _ToolRuns(BaseCallbackHandler):
    """Records a step's results as its tools return, and a tool's exception as its call's error
    result: the executor keeps them only for the next prompt, which never comes once a tool
    raises (or the run is interrupted)."""

    def __init__(self, step: _DamcStep, tools: list[str]) -> None:
        self.step = step
        self.tools = list(dict.fromkeys(tools))
        """The executor's tool names, as it lists them to a call of a tool it lacks."""
        self._waiting: list[tuple[int, ToolAgentAction]] = []
        """The step's calls whose tools have not started, with their place among its calls."""
        self._calls: list[str] = []
        """The ids of the step's calls, in order."""
        self._running: dict[UUID, tuple[MessageRecorder, ToolAgentAction, list[str], int]] = {}
        """Tool run -> the recorder of its agent run, its call, the step's call ids, its place."""
        self._handled: list[object] = []
        """Outputs a tool made of an error it handled, until its run ends (see ``handling``)."""
        self._lock = threading.Lock()
        """An async executor starts a step's tools at once (sync handlers run in threads then)."""

    def handling(
        self, flag: bool | str | Callable[[Any], Any], plain: Callable[[Any], Any]
    ) -> Callable[[Any], Any]:
        """A tool's ``handle_tool_error`` or ``handle_validation_error`` ``flag`` as a function
        giving the same output (``plain`` for ``True``), which is noted as a failed run's: the run
        reports it as its output, known by identity, right after."""

        def handle(error: Any) -> Any:
            output = (
                plain(error) if isinstance(flag, bool) else flag if isinstance(flag, str) else flag(error)
            )
            with self._lock:
                self._handled.append(output)
                del self._handled[:-_HANDLED_KEPT]
            return output

        return handle

    def expect(self, calls: list[ToolAgentAction]) -> None:
        """Record the message that made ``calls``, so their results can follow it as they come (a
        message the store refused goes in from the next prompt, and its results after it). A call
        of a tool the executor lacks gets the executor's answer to it now: the ``InvalidTool``
        that gives it reports to no one, and the results beside it, held for it, would be lost
        with the run that stops after the step."""
        reply = calls[0].message_log[-1] if calls and calls[0].message_log else None
        ids = [str(call.tool_call_id) for call in calls]
        with self._lock:
            self._waiting = []
            if reply is None or not self.step.record_reply(reply):
                return
            self._waiting = [(place, call) for place, call in enumerate(calls) if call.tool in self.tools]
            self._calls = ids
        for place, call in enumerate(calls):
            if call.tool not in self.tools:
                answer = InvalidTool()._run(call.tool, self.tools)  # as the executor answers it
                result = format_to_tool_messages([(call, answer)])[-1]
                if isinstance(result, ToolMessage):
                    result.status = "error"
                self.step.recorder.record_tool_result(result, calls=ids, place=place)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = str((serialized or {}).get("name") or kwargs.get("name"))
        with self._lock:
            waiting = [(call.tool, call.tool_call_id, call.tool_input) for _, call in self._waiting]
            found = announcement(waiting, name, inputs, input_str)
            if found is not None:
                place, call = self._waiting.pop(found)
                self._running[run_id] = (self.step.recorder, call, self._calls, place)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            handled = next((i for i, made in enumerate(self._handled) if made is output), None)
            if handled is not None:
                del self._handled[handled]
        running = self._running.pop(run_id, None)
        if running is not None:
            recorder, call, calls, place = running
            result = format_to_tool_messages([(call, output)])[-1]  # as the next prompt would hold it
            if handled is not None and isinstance(result, ToolMessage):
                result.status = "error"
            recorder.record_tool_result(result, calls=calls, place=place)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        running = self._running.pop(run_id, None)
        if running is None or bubbles_up(error):  # a pause for a human (interrupt): not a failure
            return
        recorder, call, calls, place = running
        # the error result first, in its call's place among the results held, then the others
        failed = ToolMessage(error_result(error), tool_call_id=str(call.tool_call_id), status="error")
        recorder.record_tool_result(failed, calls=calls, place=place)
        recorder.tool_failed(calls)
