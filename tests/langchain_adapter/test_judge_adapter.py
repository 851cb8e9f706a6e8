"""A LangChain chat model as the judge of ``LLMJudgeValuator``."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from damc_core.counterfactual.judge import LLMJudgeValuator
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
