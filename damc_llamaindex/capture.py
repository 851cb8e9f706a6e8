"""Tool results as they return, without touching the agent.

Workflow agents never fire the legacy ``FUNCTION_CALL`` callbacks. What they do emit:

* instrumentation spans: the ``call_tool`` step span ends with a ``ToolCallResult`` (tool name,
  arguments, call id, ``ToolOutput``), and ``BaseTool.acall`` / ``call`` spans end with the
  ``ToolOutput`` of tools called outside an agent step. :class:`DamcSpanHandler` listens there.
* the workflow event stream (``handler.stream_events()``), where ``ToolCallResult`` events pass by.
  :class:`DamcEventRecorder` records them for callers that hold the handler.

Both feed the same per-memory recorder as :class:`~damc_llamaindex.DamcMemory` and
:class:`~damc_llamaindex.DamcLLM`, so a result seen twice is recorded once.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import AsyncIterator
from typing import Any

from llama_index.core.agent.workflow.workflow_events import ToolCallResult
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.instrumentation.span import SimpleSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler
from llama_index.core.tools import BaseTool
from llama_index_instrumentation import get_dispatcher

from damc_core import DecisionMemory

from ._recorder import Recorder, recorder_for

logger = logging.getLogger("damc.llamaindex")

_STEP = ".call_tool-"
"""Span ids are ``<class>.<method>-<uuid>``: the agent step that runs one tool call."""
_TOOL = (".acall-", ".call-")
"""A tool's own call; recorded only when no agent step around it is followed."""


def _record_result(recorder: Recorder, event: ToolCallResult) -> None:
    """Record a step's tool result under the call id the model gave it."""
    output = event.tool_output
    recorder.record_tool_output(
        event.tool_name,
        event.tool_kwargs,
        output,
        call_id=event.tool_id or None,
        is_error=bool(getattr(output, "is_error", False)),
    )


class DamcSpanHandler(BaseSpanHandler[SimpleSpan]):
    """Records every tool result into a ``DecisionMemory``.

    >>> handler = DamcSpanHandler.attach(memory)   # on the root dispatcher
    >>> handler.detach()
    """

    _recorder: Recorder = PrivateAttr()
    _kinds: dict[str, tuple[str, str | None]] = PrivateAttr(default_factory=dict)
    """Open span id -> (kind, parent span id) for the spans this handler follows."""
    _warned: bool = PrivateAttr(default=False)

    def __init__(self, memory: DecisionMemory) -> None:
        super().__init__(open_spans={}, completed_spans=[], dropped_spans=[], current_span_ids={})
        self._recorder = recorder_for(memory)
        self._kinds = {}

    @classmethod
    def class_name(cls) -> str:
        return "DamcSpanHandler"

    @classmethod
    def attach(cls, memory: DecisionMemory, dispatcher_name: str = "root") -> DamcSpanHandler:
        """Create a handler and register it on a dispatcher (the root one sees every span)."""
        handler = cls(memory)
        get_dispatcher(dispatcher_name).add_span_handler(handler)
        return handler

    def detach(self, dispatcher_name: str = "root") -> None:
        handlers = get_dispatcher(dispatcher_name).span_handlers
        if self in handlers:
            handlers.remove(self)

    def new_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        parent_span_id: str | None = None,
        tags: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        if _STEP in id_:
            kind = "step"
        elif isinstance(instance, BaseTool) and any(marker in id_ for marker in _TOOL):
            kind = "tool"
        else:
            if ".init_run-" in id_:
                self._check_memory(bound_args)
            return None
        self._kinds[id_] = (kind, parent_span_id)
        return SimpleSpan(id_=id_, parent_id=parent_span_id, tags=tags or {})

    def prepare_to_exit_span(
        self,
        id_: str,
        bound_args: inspect.BoundArguments,
        instance: Any | None = None,
        result: Any | None = None,
        **kwargs: Any,
    ) -> SimpleSpan | None:
        kind, parent = self._kinds.get(id_, ("", None))
        try:
            if kind == "step" and isinstance(result, ToolCallResult):
                _record_result(self._recorder, result)
            elif kind == "tool" and parent not in self._kinds and isinstance(instance, BaseTool):
                self._recorder.record_tool_output(
                    instance.metadata.get_name(),
                    dict(bound_args.arguments.get("kwargs") or {}),
                    result,
                    call_id=None,
                    is_error=bool(getattr(result, "is_error", False)),
                )
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
        return self._close(id_)

    def _close(self, id_: str) -> SimpleSpan | None:
        self._kinds.pop(id_, None)
        with self.lock:
            return self.open_spans.get(id_)

    def _check_memory(self, bound_args: inspect.BoundArguments) -> None:
        """Warn once when a DamcMemory was used for this memory but a run starts without one:
        llama-index-core drops ``memory=`` given to an agent's constructor."""
        event = bound_args.arguments.get("ev")
        if self._warned or not self._recorder.memory_created or event is None:
            return
        if event.get("memory", None) is None:
            self._warned = True
            message = (
                "damc: an agent run started without memory=; llama-index-core ignores a memory "
                "given to the agent's constructor. Pass it on every run: agent.run(msg, memory=damc_memory)"
            )
            logger.warning(message)
            warnings.warn(message, stacklevel=2)


class DamcEventRecorder:
    """Records the ``ToolCallResult`` events of a workflow's event stream.

    >>> recorder = DamcEventRecorder(memory)
    >>> async for event in recorder.relay(agent.run("...").stream_events()):
    ...     ...
    """

    def __init__(self, memory: DecisionMemory) -> None:
        self._recorder = recorder_for(memory)

    def record(self, event: Any) -> None:
        """Record ``event`` if it is a tool result; other events are ignored."""
        if isinstance(event, ToolCallResult):
            _record_result(self._recorder, event)

    async def relay(self, events: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """Yield every event of ``events`` unchanged, recording tool results on the way."""
        async for event in events:
            self.record(event)
            yield event
