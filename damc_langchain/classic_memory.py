"""A drop-in for ``ConversationBufferMemory`` in langchain-classic chains and ``AgentExecutor``."""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import Any

from langchain_classic.base_memory import BaseMemory
from langchain_core.messages import (
    AIMessage,
    ToolMessage,
    get_buffer_string,
)
from pydantic import ConfigDict, Field, PrivateAttr

from damc_core import DecisionMemory, StoreClosedError, StoreError, valid_sequence
from damc_core.events import normalize_event, tool_events

from ._recorder import PARSE_ERROR_TOOL, to_event, to_messages

logger = logging.getLogger("damc.langchain")
UNSAVED_KEPT = 1000
"""Events a store refuses (a full disk, a locked file) that wait for it before DAMC gives up on
recording them."""


class DAMCMemory(BaseMemory):
    """Loads DAMC's context where ``ConversationBufferMemory`` would load the whole buffer.

    ``AgentExecutor(..., memory=DAMCMemory(memory=DecisionMemory(...)))``; with
    ``return_intermediate_steps=True`` the tool calls and results of each run are recorded too.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    memory: DecisionMemory
    memory_key: str = "history"
    return_messages: bool = False
    input_key: str | None = None
    output_key: str | None = None
    human_prefix: str = "Human"
    ai_prefix: str = "AI"
    budget: int | None = Field(
        default=None, gt=0, description="Token budget per load; the memory's own when None."
    )
    recall_tool: bool = Field(
        default=False,
        description="The agent has DAMC's recall tool (recall_tool(memory)) among its tools: the "
        "memory section then tells the model it can recall a card.",
    )
    _run_start: int | None = PrivateAttr(default=None)
    """The memory's event count when this run's history was loaded."""
    _unsaved: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    """Events of finished runs the store refused, in order: tried again first at the next load or
    save."""

    @property
    def memory_variables(self) -> list[str]:
        return [self.memory_key]

    def load_memory_variables(self, inputs: dict[str, Any]) -> dict[str, Any]:
        self._save_unsaved()
        self._run_start = self.memory.event_count
        query = inputs.get(self._input_key(inputs)) if inputs else None
        try:
            built = self.memory.build(
                query=str(query) if query else None, budget=self.budget, recall_tool=self.recall_tool
            )
            messages = to_messages(built.messages)
        except Exception:  # the executor runs on the whole conversation rather than fail
            logger.exception("damc: building the context failed; the history is the whole conversation")
            messages = to_messages(valid_sequence([message for _, message in self.memory.history()]))
        if self.return_messages:
            return {self.memory_key: messages}
        return {self.memory_key: get_buffer_string(messages, self.human_prefix, self.ai_prefix)}

    def save_context(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Record the run: its input, its steps when returned, its answer. What another surface
        on the same memory (a ``DamcCallbackHandler``) recorded since this run's load is not
        recorded again. A store that refuses an event (a full disk) is logged, never raised: the
        executor returns the run's answer, and the events wait for the next load or save."""
        since, self._run_start = self._run_start, None
        during_run = self.memory.messages(since=since) if since is not None else []
        recorded = Counter(_identity(m) for m in during_run)

        def first_time(identity: tuple[str, str, str]) -> bool:
            if recorded[identity] > 0:
                recorded[identity] -= 1
                return False
            return True

        user_input = str(inputs[self._input_key(inputs)])
        if first_time(("user", "", user_input)):
            self._unsaved.append({"role": "user", "content": user_input})
        calls_seen: set[int] = set()
        for action, observation in outputs.get("intermediate_steps") or ():
            if first_time(_identity({"role": "tool", "name": action.tool, "content": observation})):
                self._unsaved.extend(_step_events(action, observation, calls_seen))
        output_key = self.output_key or next(k for k in outputs if k != "intermediate_steps")
        answer = outputs[output_key]  # text, or content blocks, which are kept as they are
        answer = answer if isinstance(answer, (str, list)) else str(answer)
        if first_time(_identity({"role": "assistant", "content": answer})):
            self._unsaved.append({"role": "assistant", "content": answer})
        self._save_unsaved()

    def _save_unsaved(self) -> None:
        """Record the events waiting, in order; one the store refuses waits, with those after it,
        up to ``UNSAVED_KEPT`` of them. An event that cannot be recorded at all is left out."""
        while self._unsaved:
            try:
                self.memory.observe(self._unsaved[0])
            except StoreError as exc:
                if isinstance(exc, StoreClosedError) or len(self._unsaved) > UNSAVED_KEPT:
                    logger.error("damc: %s; %d events of the runs are not recorded", exc, len(self._unsaved))
                    self._unsaved.clear()
                else:
                    logger.warning("damc: recording the run waits for the store: %s", exc)
                return
            except Exception:
                logger.exception("damc: recording an event of the run failed; it is left out")
            self._unsaved.pop(0)

    def clear(self) -> None:
        self.memory.clear()

    def _input_key(self, inputs: dict[str, Any]) -> str:
        if self.input_key:
            return self.input_key
        candidates = [k for k in inputs if k not in (*self.memory_variables, "stop", "intermediate_steps")]
        if len(candidates) != 1:
            raise ValueError(f"DAMCMemory cannot tell the input among {candidates}; set input_key=...")
        return candidates[0]


def _step_events(action: Any, observation: Any, calls_seen: set[int]) -> list[dict[str, Any]]:
    """The events of one intermediate step: the call (once for parallel calls) and its result."""
    log = [m for m in getattr(action, "message_log", ()) if isinstance(m, AIMessage) and m.tool_calls]
    call_id = getattr(action, "tool_call_id", None)
    failed = action.tool == PARSE_ERROR_TOOL or _answers_a_missing_tool(str(action.tool), observation)
    if not (log and call_id):
        return list(tool_events(action.tool, action.tool_input, observation, error=failed))
    events = []  # a tool-calling agent: keep the model's own call and its id
    if id(log[-1]) not in calls_seen:  # parallel calls share one assistant message
        calls_seen.add(id(log[-1]))
        events.append(to_event(log[-1]))
    result = ToolMessage(
        content=_stored(observation),
        tool_call_id=call_id,
        name=action.tool,
        status="error" if failed else "success",
    )
    return [*events, to_event(result)]


def _answers_a_missing_tool(tool: str, observation: Any) -> bool:
    """Whether ``observation`` is the executor's answer to a call of a tool it lacks
    (``InvalidTool``'s): a failed call, which the steps return as an ordinary observation."""
    return (
        isinstance(observation, str)
        and observation.startswith(f"{tool} is not a valid tool, try one of [")
        and observation.endswith("].")
    )


def _identity(event: dict[str, Any]) -> tuple[str, str, str]:
    """What tells a recorded event apart within a run: a text turn by its role and text, a tool
    result by its tool and content (call ids differ between surfaces); calls by their results.
    Content is compared as the memory stores it (bytes as text, an object as JSON)."""
    role = str(event.get("role"))
    if role == "assistant" and event.get("tool_calls"):
        return ("call", "", "")
    name = str(event.get("name") or "") if role == "tool" else ""
    return (role, name, _stored(event.get("content")))


def _stored(content: Any) -> str:
    """Content as the memory stores it (bytes as text, an object as JSON), as text."""
    return _as_content(normalize_event({"role": "tool", "content": content})[0].get("content"))


def _as_content(observation: Any) -> str:
    """The observation as the agent's scratchpad sends it: JSON unless it is text already."""
    if isinstance(observation, str):
        return observation
    try:
        return json.dumps(observation, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(observation)
