"""An LLM judge as a valuator: lenient parsing, safe defaults, provenance, and the OpenAI adapter.

The replies a judge must cope with (ratings in many shapes, none, an error) are scripted: the
OpenAI client (the real ``openai`` package) talks to a recording transport that answers like the
chat completions endpoint and keeps every request it received. One test asks a real model, the
bundled SmolLM2-135M behind llama-cpp-python's OpenAI-compatible server.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from damc_core import DecisionMemory, HeuristicValuator, InMemoryStore, MemorySettings, WeightedValuators
from damc_core.counterfactual.judge import LLMJudgeValuator, OpenAIJudge, parse_rating
from damc_core.errors import ConfigError
from damc_core.types import DecisionFocus
from damc_core.value import ValuationContext

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")


class RecordingEndpoint:
    """``POST /chat/completions`` answering with scripted replies; ``requests`` holds each body."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(json.loads(request.content))
        reply = self.replies[(len(self.requests) - 1) % len(self.replies)]
        return httpx.Response(
            200,
            json={
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": self.requests[-1]["model"],
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}
                ],
            },
        )


def openai_judge(endpoint: Callable[[httpx.Request], httpx.Response]) -> OpenAIJudge:
    """An ``OpenAIJudge`` whose requests ``endpoint`` answers (a ``RecordingEndpoint``, or a refusal)."""
    client = openai.OpenAI(
        api_key="local",
        base_url="http://judge.local/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(endpoint)),
        max_retries=0,
    )
    return OpenAIJudge(client, model="judge-mini")


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("SCORE: 8 - holds the payment id the booking needs", 8.0),
        ("**Score:** 7.5/10 because it lists the flights", 7.5),
        ("I'd say 3 out of 10; it only repeats the greeting", 3.0),
        ("0 - irrelevant", 0.0),
        ("Card [c3] is highly relevant: 9/10", 9.0),
        ("The [c3] card matters a lot, 9 out of 10", 9.0),
        ("Reservation ZXQ987 is needed: 9/10", 9.0),
        ("[c12] holds the flight the user picked. 8", 8.0),
        ('{"reason": "lists 2 payment methods", "score": 8}', 8.0),
        ('{"reason": "card c3 from 2024-05-20", "score": 9}', 9.0),
        ("The user's credit score 720 is on file. SCORE: 8 - needed for the loan", 8.0),
        ("SCORE: 7-8 - holds the payment id", 7.0),
        ("Rated 0 - 10: 6, it lists the flights", 6.0),
        ("The underscore 12 in the id is odd. SCORE: 6 - still needed", 6.0),
    ],
)
def test_parse_rating_reads_scores_in_the_shapes_models_write(reply, score):
    rating = parse_rating(reply)
    assert rating.score == score
    assert rating.reason and rating.reason != "no reason given"


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("SCORE: 7/10 - holds the payment id", "holds the payment id"),
        ("**Score:** 7.5 / 10 because it lists the flights", "because it lists the flights"),
        ("SCORE: 6 out of 10 — the user's id", "the user's id"),
        ("SCORE: 10/10", "no reason given"),
    ],
)
def test_the_reason_of_a_rating_on_the_scale_starts_after_the_scale(reply, reason):
    assert parse_rating(reply).reason == reason


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        ("SCORE: 70 - very important", "outside 0-10"),
        ("This card is crucial.", "no score"),
        ("SCORE: N/A - the card only lists 2 flights", "no score after the score label"),
        ('{"score": null, "reason": "it repeats 3 earlier cards"}', "no score after the score label"),
        # SmolLM2-135M's replies to the default prompt: the scale it was given is no rating
        ("The card is not very important to the current decision, 0-10. It's a simple choice.", "no score"),
        ("SCORE: 0-10 - the card lists 2 flights", "no score after the score label"),
        ("Booking HX-8 is needed for the stay", "no score"),
        ("", "empty"),
        (None, "empty or non-text"),
    ],
)
def test_unusable_replies_give_no_score_and_say_why(reply, why):
    rating = parse_rating(reply)
    assert rating.score is None
    assert why in rating.reason


def test_judge_rates_each_card_through_the_openai_client(airline_messages, make_memory):
    memory = make_memory()
    for message in airline_messages[:6]:
        memory.observe(message)
    cards = [c for c in memory.cards() if c.summary][:3]
    endpoint = RecordingEndpoint("SCORE: 9 - the user's id", "SCORE: 2 - small talk", "banana")
    judge = LLMJudgeValuator(openai_judge(endpoint), default=0.25)
    context = ValuationContext(focus=DecisionFocus(query="Book HAT069"), current_seq=6, now=0.0)

    scored = judge.value(cards, context=context)

    assert [s.value for s in scored] == [0.9, 0.2, 0.25]
    assert scored[0].scores[0].provenance == "judge openai:judge-mini: the user's id"
    assert "no score in reply 'banana'; default" in scored[2].scores[0].provenance
    assert [r["model"] for r in endpoint.requests] == ["judge-mini"] * 3
    prompts = [r["messages"][0]["content"] for r in endpoint.requests]
    assert all("The agent's current decision: Book HAT069" in p for p in prompts)
    assert [card.summary in prompt for card, prompt in zip(cards, prompts, strict=True)] == [True] * 3

    judge.value(cards, context=context)  # same cards, same decision: answered from the cache
    assert len(endpoint.requests) == 3


def test_a_real_model_behind_an_openai_endpoint_rates_a_card(chat_server, recorded_http, make_memory):
    memory = make_memory()
    memory.observe_tool(
        "get_user_details", {"user_id": "mia_li_3668"}, {"payment_methods": ["credit_card_7815826"]}
    )
    card = memory.cards()[-1]
    client = openai.OpenAI(
        api_key="local",
        base_url=chat_server,
        http_client=httpx.Client(transport=recorded_http),
        max_retries=0,
    )
    judge = LLMJudgeValuator(OpenAIJudge(client, model="smollm2"))

    (scored,) = judge.value([card], context=ValuationContext(DecisionFocus(query="Book HAT069"), 2, 0.0))

    assert recorded_http.statuses == [200]
    (prompt,) = recorded_http.requests[0]["messages"]
    assert card.summary in prompt["content"] and "Book HAT069" in prompt["content"]
    # the reply was read: a rating, or the default with why it had none; never a failed call
    (score,) = scored.scores
    assert score.provenance.startswith("judge openai:smollm2: ") and " failed (" not in score.provenance
    assert 0.0 <= scored.value <= 1.0


def test_a_card_longer_than_the_judges_context_leaves_the_other_cards_rated(
    chat_server, recorded_http, make_memory
):
    """The server refuses that card's prompt (400, context length exceeded); the others are asked."""
    memory = make_memory()
    catalog = [{"sku": f"SKU{i:05d}", "tags": " ".join(f"tag{j}-{i}" for j in range(40))} for i in range(60)]
    memory.observe_tool("list_products", {"category": "all"}, catalog)
    memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
    memory.observe({"role": "assistant", "content": "Which payment method?"})
    client = openai.OpenAI(
        api_key="local",
        base_url=chat_server,
        http_client=httpx.Client(transport=recorded_http),
        max_retries=0,
    )
    judge = LLMJudgeValuator(OpenAIJudge(client, model="smollm2", max_tokens=8))

    scored = judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 4, 0.0))

    provenance = {s.card.id: s.scores[0].provenance for s in scored}
    assert provenance["c1"] == "judge openai:smollm2 failed (BadRequestError); default"
    assert sorted(recorded_http.statuses) == [200] * (len(scored) - 1) + [400]
    assert not any("not asked" in why for why in provenance.values())


def test_failing_judge_gives_the_default_and_records_why(airline_messages, make_memory):
    """Once the model failed, the decision's other cards are not asked: a server that is down
    or slow would hold the step once per card."""
    refused: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        refused.append(request)
        return httpx.Response(500, json={"error": {"message": "overloaded"}})

    memory = make_memory()
    for message in airline_messages[:4]:
        memory.observe(message)
    judge = LLMJudgeValuator(openai_judge(refuse), default=0.4)

    scored = judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 4, 0.0))

    assert len(scored) == 4 and {s.value for s in scored} == {0.4}
    first, *rest = (s.scores[0].provenance for s in scored)
    assert first == "judge openai:judge-mini failed (InternalServerError); default"
    assert set(rest) == {"judge openai:judge-mini: not asked, it failed on card c0; default"}
    assert len(refused) == 1

    judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 4, 0.0))
    assert len(refused) == 2  # a failure is not remembered: the next decision asks again


def test_judge_combines_with_heuristics_and_keeps_both_provenances(airline_messages, make_memory):
    endpoint = RecordingEndpoint("SCORE: 10 - needed now")
    combined = WeightedValuators(
        ((HeuristicValuator(), 1.0), (LLMJudgeValuator(openai_judge(endpoint)), 1.0))
    )
    memory = make_memory(valuator=combined)
    for message in airline_messages[:8]:
        memory.observe(message)

    built = memory.build(budget=400)

    judged = [d for d in built.decisions if any(s.name == "judge" for s in d.scores)]
    assert judged, "every valued card carries the judge's score"
    assert all(any(s.name == "decay" for s in d.scores) for d in judged)
    assert endpoint.requests


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ({"default": 3}, "default must be a number in"),
        ({"default": "0.3"}, "default must be a number in"),
        ({"max_cards": "24"}, "max_cards must be a whole number"),
        ({"max_cards": 2.5}, "max_cards must be a whole number"),
        ({"cache_size": "4096"}, "cache_size must be a whole number"),
    ],
)
def test_judge_settings_read_from_a_config_file_are_checked_when_made(setting, match):
    """Each would pass unchecked and fail inside the agent's first build, or at the first rating."""
    with pytest.raises(ConfigError, match=match):
        LLMJudgeValuator(openai_judge(RecordingEndpoint("SCORE: 1")), **setting)


def test_judge_settings_are_checked_when_made():
    endpoint = RecordingEndpoint("SCORE: 1")
    with pytest.raises(ConfigError, match="placeholders"):
        LLMJudgeValuator(openai_judge(endpoint), prompt="Rate this")


def test_a_prompt_that_shows_the_json_it_wants_rates_every_card(airline_messages):
    endpoint = RecordingEndpoint('{"score": 7, "reason": "needed"}')
    prompt = 'Decision: {query}\nCard: {card}\nAnswer as JSON: {"score": <0-10>, "reason": "..."}'
    memory = DecisionMemory(
        store=InMemoryStore(), valuator=LLMJudgeValuator(openai_judge(endpoint), prompt=prompt)
    )
    for message in airline_messages[:4]:
        memory.observe(message)

    built = memory.build(query="Book HAT069", recent_messages=0)  # every card valued

    asked = endpoint.requests[0]["messages"][-1]["content"]
    assert asked.startswith("Decision: Book HAT069\nCard: [c")
    assert asked.endswith('Answer as JSON: {"score": <0-10>, "reason": "..."}')
    judged = [s for d in built.decisions for s in d.scores if s.name == "judge"]
    assert judged and all(s.value == 0.7 for s in judged)


def test_a_judge_server_that_stops_answering_holds_the_step_for_the_timeout_only(make_memory, caplog):
    """A server that took the connection and never replies: the rating gives up after the judge's
    timeout (the client's own default is 10 minutes a try) and the card keeps the default."""
    import socket
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        client = openai.OpenAI(
            api_key="local", base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1", max_retries=0
        )
        memory = make_memory()
        memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
        judge = LLMJudgeValuator(OpenAIJudge(client, model="judge-mini", timeout=0.5), default=0.4)

        started = time.monotonic()
        with caplog.at_level("WARNING", logger="damc"):
            (scored,) = judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 1, 0.0))

    assert time.monotonic() - started < 5
    assert scored.value == 0.4
    assert scored.scores[0].provenance == "judge openai:judge-mini failed (APITimeoutError); default"
    assert "judge openai:judge-mini failed on card c0" in caplog.text


def test_the_timeout_bounds_the_rating_with_the_clients_retries_too(make_memory):
    """The ``openai`` package tries a request that timed out twice more: three timeouts, with waits
    between, where the judge's timeout says one."""
    import socket
    import time

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        client = openai.OpenAI(api_key="local", base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1")
        memory = make_memory()
        memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
        judge = LLMJudgeValuator(OpenAIJudge(client, model="judge-mini", timeout=1.0), default=0.4)

        started = time.monotonic()
        (scored,) = judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 1, 0.0))

    assert time.monotonic() - started < 2.0
    assert scored.scores[0].provenance == "judge openai:judge-mini failed (APITimeoutError); default"
    assert client.max_retries == openai.DEFAULT_MAX_RETRIES  # the caller's client is left as it was


def test_a_judge_timeout_that_is_not_a_positive_number_is_a_config_error():
    endpoint = RecordingEndpoint("SCORE: 1")
    with pytest.raises(ConfigError, match="timeout must be > 0 seconds"):
        OpenAIJudge(openai_judge(endpoint).client, model="judge-mini", timeout=0)
    with pytest.raises(ConfigError, match="timeout must be > 0 seconds"):
        OpenAIJudge(openai_judge(endpoint).client, model="judge-mini", timeout="30")


def test_a_judge_that_failed_is_not_asked_again_in_the_same_build(airline_messages, make_memory):
    """A build values its memory candidates, then the tool results of its recent window: a server
    that is down (or times out) would be waited on twice per step."""
    refused: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        refused.append(request)
        return httpx.Response(503, json={"error": {"message": "overloaded"}})

    memory = make_memory(valuator=LLMJudgeValuator(openai_judge(refuse), default=0.4))
    for message in airline_messages[:10]:  # the booking's result is the newest message
        memory.observe(message)
    assert memory.build(budget=600).messages[-1]["role"] == "tool"
    assert len(refused) == 1

    memory.observe(airline_messages[10])
    memory.observe({"role": "user", "content": "Now book the return flight, SEA to JFK"})
    memory.observe_tool(
        "search_direct_flight", {"origin": "SEA", "destination": "JFK"}, [{"flight": "HAT112"}]
    )
    built = memory.build(budget=600)

    assert len(refused) == 2  # the next decision asks again
    judged = [s.provenance for d in built.decisions for s in d.scores if s.name == "judge"]
    assert judged and all(" failed (" in why or "not asked" in why for why in judged)


class ReasoningEndpoint(RecordingEndpoint):
    """Answers as OpenAI does for a reasoning model (o4-mini): ``max_tokens`` and a temperature
    other than 1 are refused, and the first ``reasoning`` completion tokens go to its reasoning."""

    reasoning = 200

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        if "max_tokens" in body:
            return self.refuse(body, "max_tokens", "unsupported_parameter")
        if body.get("temperature", 1) != 1:
            return self.refuse(body, "temperature", "unsupported_value")
        response = super().__call__(request)
        if body.get("max_completion_tokens", 10_000) <= self.reasoning:
            reply = json.loads(response.content)
            reply["choices"][0].update(finish_reason="length", message={"role": "assistant", "content": ""})
            return httpx.Response(200, json=reply)
        return response

    def refuse(self, body: dict, param: str, code: str) -> httpx.Response:
        self.requests.append(body)
        message = f"Unsupported parameter: '{param}' is not supported with this model."
        error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
        return httpx.Response(400, json={"error": error})


def reasoning_judge(endpoint: RecordingEndpoint, **settings) -> OpenAIJudge:
    client = openai_judge(endpoint).client
    return OpenAIJudge(client, model="o4-mini", **settings)


def test_a_reasoning_model_rates_cards_with_its_own_token_limit_and_no_temperature(make_memory):
    endpoint = ReasoningEndpoint("SCORE: 9 - the user's id")
    memory = make_memory()
    memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
    judge = LLMJudgeValuator(reasoning_judge(endpoint, temperature=None, max_completion_tokens=1000))

    (scored,) = judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 1, 0.0))

    assert scored.value == 0.9
    (request,) = endpoint.requests
    assert request["max_completion_tokens"] == 1000
    assert "max_tokens" not in request and "temperature" not in request


def test_a_reasoning_model_that_spends_the_limit_thinking_says_so(make_memory, caplog):
    """It replies with no text, cut at the limit: the same for every card, so the others are not asked."""
    endpoint = ReasoningEndpoint("SCORE: 9 - the user's id")
    memory = make_memory()
    memory.observe({"role": "user", "content": "Book HAT069 for mia_li_3668"})
    memory.observe({"role": "user", "content": "With my visa"})
    judge = LLMJudgeValuator(
        reasoning_judge(endpoint, temperature=None, max_completion_tokens=80), default=0.4
    )

    with caplog.at_level("WARNING", logger="damc"):
        scored = judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 2, 0.0))

    assert [s.value for s in scored] == [0.4, 0.4] and len(endpoint.requests) == 1
    assert "the reply was cut at max_completion_tokens=80 before any text; give it more room" in caplog.text


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ({"temperature": "0"}, "temperature must be a number in"),
        ({"temperature": 3.0}, "temperature must be a number in"),
        ({"max_tokens": "80"}, "max_tokens must be a whole number > 0"),
        ({"max_completion_tokens": 0}, "max_completion_tokens must be a whole number > 0"),
        ({"model": ""}, "needs the model's name"),
        ({"model": None}, "needs the model's name"),
        ({"client": "https://api.openai.com/v1"}, "needs an openai.OpenAI client"),
    ],
)
def test_openai_judge_settings_are_checked_when_made(setting, match):
    """Each would pass unchecked and fail every rating, at every build of the agent."""
    settings = {"client": openai_judge(RecordingEndpoint("SCORE: 1")).client, "model": "o4-mini", **setting}
    with pytest.raises(ConfigError, match=match):
        OpenAIJudge(**settings)


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (401, {"message": "Incorrect API key provided", "code": "invalid_api_key"}),
        (404, {"message": "The model `judge-mini` does not exist", "code": "model_not_found"}),
        (400, {"message": "Unsupported parameter: 'max_tokens'", "param": "max_tokens"}),
    ],
)
def test_an_error_about_the_key_model_or_settings_is_not_asked_again_for_each_card(
    status, error, airline_messages, make_memory
):
    """It is no card's own, unlike a card longer than the model's context: every card would get it."""
    refused: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        refused.append(request)
        return httpx.Response(status, json={"error": {"type": "invalid_request_error", **error}})

    memory = make_memory()
    for message in airline_messages[:6]:
        memory.observe(message)
    judge = LLMJudgeValuator(openai_judge(refuse), default=0.4)

    scored = judge.value(memory.cards(), context=ValuationContext(DecisionFocus(), 6, 0.0))

    assert {s.value for s in scored} == {0.4} and len(refused) == 1
    assert sum("not asked, it failed on card" in s.scores[0].provenance for s in scored) == len(scored) - 1


def test_mixed_with_heuristics_each_card_keeps_its_own_scores_past_the_shortlist(make_memory):
    """Past ``max_candidates`` the candidates come in no particular order; the heuristics return
    them oldest first and the judge as given, so the mix pairs each part's values by card."""
    endpoint = RecordingEndpoint("SCORE: 5 - may matter")
    combined = WeightedValuators(
        ((HeuristicValuator(), 1.0), (LLMJudgeValuator(openai_judge(endpoint)), 1.0))
    )
    memory = make_memory(valuator=combined, settings=MemorySettings(max_candidates=4, recent_messages=0))
    for number in range(60, 66):
        memory.observe({"role": "user", "content": f"What about flight HAT0{number}?"})
        memory.observe_tool("get_flight", {"flight": f"HAT0{number}"}, {"status": "available"})
    request = memory.observe({"role": "user", "content": "Book HAT069."})

    built = memory.build(budget=2000)

    requests = [d for d in built.decisions if any(s.name == "request" for s in d.scores)]
    assert [d.card_id for d in requests] == [request.id]
    assert requests[0].value == pytest.approx((1.0 + 0.5) / 2)  # the request's 1.0 beside the judge's 5/10
    assert endpoint.requests
