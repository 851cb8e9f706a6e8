"""``wrap(agent_executor, memory)``: the same langchain-classic executor, with DAMC before its model."""

from __future__ import annotations

import logging
from typing import Any

from langchain_classic.agents import AgentExecutor
from langchain_classic.agents.output_parsers.openai_tools import OpenAIToolsAgentOutputParser
from langchain_classic.agents.output_parsers.tools import ToolsAgentOutputParser
from langchain_core.agents import AgentAction, AgentFinish
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompt_values import PromptValue
from langchain_core.runnables import RunnableBinding, RunnableLambda, RunnableSequence
from pydantic import BaseModel

from damc_core import DecisionMemory

from ._recorder import MessageRecorder, to_event, to_messages
from .middleware import split_system, with_memory_section

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
    """
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
    context = _DamcStep(memory, budget)
    damc = RunnableLambda(context, name="damc_context")
    answer = RunnableLambda(context.record_answer, name="damc_answer")
    sequence: RunnableSequence[Any, Any] = RunnableSequence(*steps[:index], damc, *steps[index:], answer)
    return executor.model_copy(update={"agent": agent.model_copy(update={"runnable": sequence})})


def _describe(agent: Any) -> str:
    runnable = getattr(agent, "runnable", None)
    if isinstance(runnable, RunnableSequence):
        return f"{type(agent).__name__} ending in {type(runnable.last).__name__}"
    return type(agent).__name__


def _is_chat_model(step: Any) -> bool:
    return isinstance(step, BaseChatModel) or (
        isinstance(step, RunnableBinding) and isinstance(step.bound, BaseChatModel)
    )


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

    def __init__(self, memory: DecisionMemory, budget: int | None) -> None:
        self.memory = memory
        self.budget = budget
        self.recorder = MessageRecorder(memory)

    def __call__(self, prompt: PromptValue) -> list[BaseMessage]:
        messages = prompt.to_messages()
        system = messages[0] if messages and isinstance(messages[0], SystemMessage) else None
        dialogue = messages[1:] if system is not None else messages
        start = next(
            (i for i in range(len(dialogue) - 1, -1, -1) if isinstance(dialogue[i], HumanMessage)), 0
        )
        run = dialogue[start:]
        try:
            if not any(isinstance(m, (AIMessage, ToolMessage)) for m in run):
                if self.memory.event_count == 0:
                    MessageRecorder(self.memory).observe(dialogue[:start])
                self.recorder = MessageRecorder(self.memory)  # a new run: positions start over
                if run and _unanswered_request(self.memory) == to_event(run[0]).get("content"):
                    self.recorder.assume_recorded(run[:1])  # a run retried after it failed
            self.recorder.observe(run)
            built = self.memory.build(budget=self.budget)
            memory_section, recent = split_system(built.messages)
            converted = to_messages(recent)
        except Exception:  # the agent keeps running on its own prompt rather than fail
            logger.exception("damc: building the context failed; the model gets the prompt unchanged")
            return messages
        head = with_memory_section(system, memory_section)
        return [head, *converted] if head is not None else converted

    def record_answer(self, decision: list[AgentAction] | AgentFinish) -> list[AgentAction] | AgentFinish:
        """The final answer becomes an assistant turn: no later prompt of the agent holds it."""
        if isinstance(decision, AgentFinish):
            try:
                self.memory.observe({"role": "assistant", "content": decision.return_values.get("output")})
            except Exception:
                logger.exception("damc: recording the final answer failed; the agent goes on")
        return decision
