"""A LangChain chat model as the judge of ``LLMJudgeValuator``."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from damc_core.counterfactual.judge import LLMJudgeValuator
from damc_core.errors import ConfigError
from damc_core.types import DecisionFocus
from damc_core.value import ValuationContext
from damc_langchain import ChatModelJudge


def test_chat_model_judge_sends_one_human_message_and_parses_the_reply(
    recording_model, airline_messages, make_memory
):
    model = recording_model(AIMessage("SCORE: 6 - the flight list the booking picks from"))
    memory = make_memory()
    for message in airline_messages[:6]:
        memory.observe(message)
    card = memory.cards()[-1]

    scored = LLMJudgeValuator(ChatModelJudge(model)).value(
        [card], context=ValuationContext(DecisionFocus(query="Book HAT069"), 6, 0.0)
    )

    assert scored[0].value == 0.6
    assert (
        scored[0].scores[0].provenance == "judge langchain:recording: the flight list the booking picks from"
    )
    (prompt,) = model.received
    assert len(prompt) == 1 and isinstance(prompt[0], HumanMessage)
    assert card.summary in prompt[0].content


def test_a_wrapped_chat_model_judges_too(recording_model, airline_messages, make_memory):
    model = recording_model(AIMessage("SCORE: 3 - not needed"))
    memory = make_memory()
    memory.observe(airline_messages[1])

    judge = ChatModelJudge(model.with_retry(stop_after_attempt=2))
    scored = LLMJudgeValuator(judge).value(
        memory.cards(), context=ValuationContext(DecisionFocus(query="Book HAT069"), 2, 0.0)
    )

    assert judge.name == "langchain:RunnableRetry" and scored[0].value == 0.3


def test_a_judge_chain_that_returns_text_judges_too(recording_model, airline_messages, make_memory):
    from langchain_core.output_parsers import StrOutputParser

    model = recording_model(AIMessage("SCORE: 8 - the fare the booking needs"))
    memory = make_memory()
    memory.observe(airline_messages[1])

    judge = ChatModelJudge(model | StrOutputParser())
    scored = LLMJudgeValuator(judge).value(
        memory.cards(), context=ValuationContext(DecisionFocus(query="Book HAT069"), 2, 0.0)
    )

    assert scored[0].value == 0.8
    assert scored[0].scores[0].provenance == "judge langchain:RunnableSequence: the fare the booking needs"


def test_the_judges_reply_is_not_streamed_as_the_agents_answer(recording_model):
    from langchain_core.messages import AIMessageChunk

    from damc_core import DecisionMemory, InMemoryStore

    from .scenario import SCRIPT
    from .test_langgraph import react_agent

    judge = recording_model(*[AIMessage("SCORE: 7 - the user's request")] * 20)
    memory = DecisionMemory(store=InMemoryStore(), valuator=LLMJudgeValuator(ChatModelJudge(judge)))
    agent = react_agent(recording_model(*SCRIPT), memory)

    streamed = [
        message.content
        for message, _ in agent.stream(
            {"messages": [HumanMessage("Book HAT107 for mia_li_3668 with my visa")]}, stream_mode="messages"
        )
        if isinstance(message, (AIMessage, AIMessageChunk))
    ]

    assert judge.received  # the judge rated the cards of every model call
    assert streamed == [m.content for m in SCRIPT]


def test_a_reasoning_model_that_spends_the_limit_thinking_says_so(recording_model, make_memory, caplog):
    """Its reply has no text, cut at the limit: the same for every card, so the others are not asked."""
    cut = AIMessage("", response_metadata={"finish_reason": "length"})
    model = recording_model(cut, cut)
    memory = make_memory()
    memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
    memory.observe({"role": "user", "content": "With my visa"})

    with caplog.at_level("WARNING", logger="damc"):
        scored = LLMJudgeValuator(ChatModelJudge(model), default=0.4).value(
            memory.cards(), context=ValuationContext(DecisionFocus(), 2, 0.0)
        )

    assert [s.value for s in scored] == [0.4, 0.4] and len(model.received) == 1
    assert "cut at the model's token limit before any text" in caplog.text


def test_a_judge_whose_server_stopped_answering_holds_the_step_for_its_timeout_only(make_memory, caplog):
    """``ChatOpenAI`` waits 10 minutes a try by default; the judge gives up after its own timeout and
    the card keeps the default."""
    import socket
    import time

    from langchain_openai import ChatOpenAI

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        model = ChatOpenAI(
            model="judge-mini",
            api_key="local",
            base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
            max_retries=0,
        )
        memory = make_memory()
        memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
        judge = LLMJudgeValuator(ChatModelJudge(model, timeout=0.5), default=0.4)

        started = time.monotonic()
        with caplog.at_level("WARNING", logger="damc"):
            (scored,) = judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 1, 0.0))

    assert time.monotonic() - started < 5
    assert scored.value == 0.4
    assert scored.scores[0].provenance == "judge langchain:openai-chat failed (TimeoutError); default"
    assert "gave no rating within 0.5 s" in caplog.text


def test_a_judge_timeout_that_is_not_a_positive_number_is_a_config_error(recording_model):
    for timeout in (0, "30", float("nan")):
        with pytest.raises(ConfigError, match="timeout must be > 0 seconds"):
            ChatModelJudge(recording_model(), timeout=timeout)


def test_a_judge_made_without_a_model_is_a_config_error():
    with pytest.raises(ConfigError, match="needs a chat model or a runnable"):
        ChatModelJudge("gpt-4o-mini")
