"""Tool calls and results as they return, without touching the agent.

Workflow agents never fire the legacy ``FUNCTION_CALL`` callbacks, and the messages they keep hold
a tool's output as text only (a dict returned by a ``FunctionTool`` becomes its Python repr, an
exception its message). What they do emit:

* instrumentation spans: the ``run_agent_step`` step span ends with an ``AgentOutput`` (the model's
  reply with all the tool calls it asks for at once, and a ReAct reply's thought), the ``call_tool``
  step span with a ``ToolCallResult`` (tool name, arguments, call id, ``ToolOutput`` with
  ``raw_output`` and ``is_error``), and ``BaseTool.acall`` / ``call`` spans end with the
  ``ToolOutput`` of tools called outside an agent step. A run's steps are children of its ``run``
  span, whose instance is the agent or workflow.
* the workflow event stream (``handler.stream_events()``), where the same ``AgentOutput`` and
  ``ToolCallResult`` events pass by. :class:`DamcEventRecorder` records them for callers that hold
  the handler.

The runs of an agent that uses :class:`~damc_llamaindex.DamcMemory` (``memory=``) or
:class:`~damc_llamaindex.DamcLLM` are followed as soon as one of them exists; a
:class:`DamcSpanHandler` follows the agents, workflows and tools it is given. Every surface feeds the
per-memory recorder, so a result seen twice is recorded once.
"""

from __future__ import annotations

import inspect
import logging
import threading
import warnings
from collections.abc import AsyncIterator
from typing import Any

from llama_index.core.agent.workflow import AgentWorkflow, BaseWorkflowAgent
from llama_index.core.agent.workflow.workflow_events import AgentOutput, ToolCallResult
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation.span import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.tools import BaseTool, ToolOutput
from llama_index.core.workflow import StopEvent, Workflow
from llama_index_instrumentation import get_dispatcher

from damc_core import DecisionMemory

from ._recorder import Recorder, recorder_for
from .llm import PREDICTING, DamcLLM
from .memory import DamcMemory

logger = logging.getLogger("damc.llamaindex")

_RUN = ".run-"
"""Span ids are ``<class>.<method>-<uuid>``: a workflow's ``run``, the parent of its steps."""
_START = ".init_run-"
"""An agent run's first step: its start event holds the run's ``memory=``."""
_AGENT_STEP = ".run_agent_step-"
_STEPS = (_AGENT_STEP, ".call_tool-", ".aggregate_tool_results-", ".parse_agent_output-")
"""The agent steps followed: one model reply (with the tool calls it asks for), one tool call, the
step that ends a run with the output of a ``return_direct`` tool as its answer, and the step that
asks the model for the answer past ``max_iterations`` (``early_stopping_method="generate"``)."""
_TOOL = (".acall-", ".call-")
"""A tool's own call; recorded only when no agent step around it is followed."""
_RUNS_KEPT = 4096
"""A ``run`` span ends as soon as ``run()`` returns its handler, before its steps: the runs followed
are remembered by span id, the oldest forgotten past this many."""


def _expect_calls(recorder: Recorder, output: AgentOutput) -> None:
    """Note the reply behind a step's tool calls, so that they are recorded together with its text,
    or record the run's answer. A reply to be retried calls nothing. The agent adds the run's
    ``ToolCallResult``s to its final output after writing it to the stream, so a consumer reading
    the stream later finds them listed with the answer: they are not calls to come."""
    if not output.retry_messages:
        calls = [c for c in output.tool_calls if isinstance(c, ToolSelection)]
        if calls:
            recorder.expect_calls(output.response, calls)
        else:  # the run's answer
            recorder.record_answer(output.response)


def _record_result(recorder: Recorder, event: ToolCallResult) -> None:
    """Record a step's tool result under the call id the model gave it."""
    recorder.record_tool_output(
        event.tool_name, event.tool_kwargs, event.tool_output, call_id=event.tool_id or None
    )


def _memories_by_agent(candidate: object) -> dict[str, DecisionMemory]:
    """Agent name -> the DAMC memory of its ``DamcLLM``, for a workflow or an agent."""
    if isinstance(candidate, AgentWorkflow):
        agents = list(candidate.agents.values())
    else:
        agents = [candidate] if isinstance(candidate, BaseWorkflowAgent) else []
    return {a.name: a.llm.memory for a in agents if isinstance(a.llm, DamcLLM)}


def _memory_of(candidate: object) -> DecisionMemory | None:
    """The DAMC memory of a run's ``memory=``, or of the ``DamcLLM`` its agents use (one only)."""
    if isinstance(candidate, DamcMemory):
        return candidate.memory
    memories = {id(m): m for m in _memories_by_agent(candidate).values()}
    return next(iter(memories.values())) if len(memories) == 1 else None


def _predicting_recorder() -> Recorder | None:
    """The recorder of the ``DamcLLM.predict_and_call`` this tool is called by, if any."""
    predicting = PREDICTING.get()
    return None if predicting is None else predicting.recorder


class _ByAgent:
    """The recorders of a workflow run whose agents' ``DamcLLM``s hold different memories: each
    agent's steps go to its own. Its agents take turns, and the tool calls between two model steps
    are those of the agent that stepped last."""

    def __init__(self, recorders: dict[str, Recorder]) -> None:
        self._recorders = recorders
        self._current: Recorder | None = None

    def step_owner(self, step_id: str, bound_args: inspect.BoundArguments) -> Recorder | None:
        if _AGENT_STEP in step_id:
            event = bound_args.arguments.get("ev")
            self._current = self._recorders.get(str(getattr(event, "current_agent_name", "")))
        return self._current


class _ToolSpans(BaseSpanHandler[SimpleSpan]):
    """Records the tool results of the runs (and lone tool calls) :meth:`_owner` assigns a memory:
    by default, the runs of agents that use a ``DamcMemory`` or a ``DamcLLM``."""

    _runs: dict[str, Recorder | _ByAgent] = PrivateAttr(default_factory=dict)
    """``run`` span id -> the recorder of the run (or of each of its agents)."""
    _open: dict[str, Recorder] = PrivateAttr(default_factory=dict)
    """Open span id -> recorder, for the ``call_tool`` steps and tool calls followed."""

    def __init__(self) -> None:
        super().__init__(open_spans={}, completed_spans=[], dropped_spans=[], current_span_ids={})

    def _owner(self, candidate: object) -> Recorder | None:
        """The recorder for a run's workflow or ``memory=``, or for a tool called outside a run."""
        memory = _memory_of(candidate)
        return None if memory is None else recorder_for(memory)

    def _run_owner(self, workflow: Workflow) -> Recorder | _ByAgent | None:
        """Who records a workflow's run: its memory's recorder, or each agent's own."""
        owner = self._owner(workflow)
        memories = _memories_by_agent(workflow)
        if owner is None and len({id(m) for m in memories.values()}) > 1:
            return _ByAgent({name: recorder_for(memory) for name, memory in memories.items()})
        return owner

    def _run_started(self, memory: object) -> None:
        """A run this handler follows starts with ``memory``."""

    def new_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        parent_span_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        if _RUN in id_ and isinstance(instance, Workflow):
            self._follow_run(id_, self._run_owner(instance))
            return None
        if _START in id_ and parent_span_id is not None:
            event = bound_args.arguments.get("ev")
            memory = None if event is None else event.get("memory", None)
            self._follow_run(parent_span_id, self._owner(memory))
            if parent_span_id in self._runs:
                self._run_started(memory)
            return None
        if any(step in id_ for step in _STEPS):
            run = self._runs.get(parent_span_id or "")
            owner = run.step_owner(id_, bound_args) if isinstance(run, _ByAgent) else run
        elif (
            isinstance(instance, BaseTool)
            and any(m in id_ for m in _TOOL)
            and parent_span_id not in self._open
        ):
            owner = self._owner(instance) or _predicting_recorder()
        else:
            return None
        if owner is None:
            return None
        self._open[id_] = owner
        return SimpleSpan(id_=id_, parent_id=parent_span_id, tags=tags or {})

    def _follow_run(self, run_id: str, owner: Recorder | _ByAgent | None) -> None:
        if owner is None:
            return
        with self.lock:
            self._runs.setdefault(run_id, owner)
            while len(self._runs) > _RUNS_KEPT:
                del self._runs[next(iter(self._runs))]

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        owner = self._open.pop(id_, None)
        try:
            if owner is not None and isinstance(result, ToolCallResult):
                _record_result(owner, result)
            elif owner is not None and isinstance(result, AgentOutput):
                _expect_calls(owner, result)
            elif (
                owner is not None and isinstance(result, StopEvent) and isinstance(result.result, AgentOutput)
            ):
                owner.record_direct_answer(result.result.response)
            elif owner is not None and isinstance(instance, BaseTool) and isinstance(result, ToolOutput):
                _record_tool(owner, instance, bound_args, result)
        except Exception:  # never raise into the instrumented code
            logger.exception("damc: reading a tool span failed; the agent goes on")
        return self._close(id_)

    def prepare_to_drop_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        err: BaseException | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        owner = self._open.pop(id_, None)
        predicting = PREDICTING.get()
        try:  # a tool predict_and_call ran raised: it answers the call with the error, as a step does
            if (
                owner is not None
                and predicting is not None
                and predicting.recorder is owner
                and isinstance(instance, BaseTool)
                and isinstance(err, Exception)
            ):
                name = instance.metadata.get_name()
                failed = ToolOutput(
                    content=str(err),
                    tool_name=name,
                    raw_input=_tool_arguments(instance, bound_args),
                    raw_output=str(err),
                    is_error=True,
                    exception=err,
                )
                _record_tool(owner, instance, bound_args, failed)
        except Exception:
            logger.exception("damc: reading a tool span failed; the agent goes on")
        return self._close(id_)

    def _close(self, id_: str) -> SimpleSpan | None:
        with self.lock:
            return self.open_spans.get(id_)


_DAMC_RUNS: _ToolSpans | None = None
_DAMC_RUNS_LOCK = threading.Lock()


def follow_damc_runs() -> None:
    """Record the tool outputs of runs that use a ``DamcMemory`` or ``DamcLLM`` (once per process):
    the agent keeps only their text, so structured data and errors come from the spans."""
    global _DAMC_RUNS
    with _DAMC_RUNS_LOCK:
        if _DAMC_RUNS is None:
            _DAMC_RUNS = _ToolSpans()
            get_dispatcher().add_span_handler(_DAMC_RUNS)


class DamcSpanHandler(_ToolSpans):
    """Records into a ``DecisionMemory`` the tool results of its own runs only: those of the agents
    or workflows in ``scope`` (and calls of the tools in it made outside them), and those through a
    ``DamcMemory`` or ``DamcLLM`` over this memory, which are recorded even without a handler.

    >>> handler = DamcSpanHandler.attach(memory, agent)   # on the root dispatcher
    >>> handler.detach()
    """

    _recorder: Recorder = PrivateAttr()
    _scope: tuple[Workflow | BaseTool, ...] = PrivateAttr()
    _warned: bool = PrivateAttr(default=False)

    def __init__(self, memory: DecisionMemory, *scope: Workflow | BaseTool) -> None:
        super().__init__()
        self._recorder = recorder_for(memory)
        self._scope = scope

    @classmethod
    def class_name(cls) -> str:
        return "DamcSpanHandler"

    @classmethod
    def attach(
        cls, memory: DecisionMemory, *scope: Workflow | BaseTool, dispatcher_name: str = "root"
    ) -> DamcSpanHandler:
        """Create a handler for ``scope`` and register it on a dispatcher (the root one sees every
        span). Other agents' runs, another session's included, are left alone."""
        handler = cls(memory, *scope)
        get_dispatcher(dispatcher_name).add_span_handler(handler)
        return handler

    def detach(self, dispatcher_name: str = "root") -> None:
        handlers = get_dispatcher(dispatcher_name).span_handlers
        if self in handlers:
            handlers.remove(self)

    def _owner(self, candidate: object) -> Recorder | None:
        if any(candidate is s for s in self._scope) or _memory_of(candidate) is self._recorder.memory:
            return self._recorder
        return None

    def _run_owner(self, workflow: Workflow) -> Recorder | None:
        """Its own memory's runs only: the agents of a workflow with several memories are followed
        without a handler."""
        return self._owner(workflow)

    def _run_started(self, memory: object) -> None:
        """Warn once when a DamcMemory was used for this memory but a run starts without one:
        llama-index-core drops ``memory=`` given to an agent's constructor."""
        if self._warned or not self._recorder.memory_created or memory is not None:
            return
        self._warned = True
        message = (
            "damc: an agent run started without memory=; llama-index-core ignores a memory "
            "given to the agent's constructor. Pass it on every run: agent.run(msg, memory=damc_memory)"
        )
        logger.warning(message)
        warnings.warn(message, stacklevel=2)


class DamcEventRecorder:
    """Records the tool calls (``AgentOutput``), results (``ToolCallResult``) and the answer a
    ``return_direct`` tool gives (``StopEvent``) of a workflow's event stream.

    >>> recorder = DamcEventRecorder(memory)
    >>> async for event in recorder.relay(agent.run("...").stream_events()):
    ...     ...
    """

    def __init__(self, memory: DecisionMemory) -> None:
        self._recorder = recorder_for(memory)

    def record(self, event: Any) -> None:
        """Record ``event`` if it is a model reply or a tool result; other events are ignored."""
        if isinstance(event, ToolCallResult):
            _record_result(self._recorder, event)
        elif isinstance(event, AgentOutput):
            _expect_calls(self._recorder, event)
        elif isinstance(event, StopEvent) and isinstance(event.result, AgentOutput):
            self._recorder.record_direct_answer(event.result.response)

    async def relay(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Yield every event of ``events`` unchanged, recording tool calls and results on the way."""
        async for event in events:
            self.record(event)
            yield event


def _record_tool(owner: Recorder, tool: BaseTool, bound: inspect.BoundArguments, output: ToolOutput) -> None:
    """Record the output of a tool called outside an agent step; in a ``predict_and_call``, under
    the id the model gave the call."""
    name, arguments = tool.metadata.get_name(), _tool_arguments(tool, bound)
    predicting = PREDICTING.get()
    call_id = predicting.call_id(name, arguments) if predicting and predicting.recorder is owner else None
    owner.record_tool_output(name, arguments, output, call_id=call_id)


def _tool_arguments(tool: BaseTool, bound: inspect.BoundArguments) -> dict[str, Any]:
    """The arguments of a tool called directly (``tool.call("u1", detail=True)``): its keywords,
    and its positional ones under the names of the tool's schema, in order (``arg0``, ... past them)."""
    arguments = dict(bound.arguments.get("kwargs") or {})
    schema = getattr(tool.metadata, "fn_schema", None)
    names = list(getattr(schema, "model_fields", None) or ())
    for index, value in enumerate(bound.arguments.get("args") or ()):
        arguments[names[index] if index < len(names) else f"arg{index}"] = value
    return arguments
