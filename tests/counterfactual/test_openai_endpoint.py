"""OpenAICompatibleScorer against llama.cpp's OpenAI-compatible server with the bundled model, on loopback."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp.server", reason="needs llama-cpp-python[server]")
pytest.importorskip("openai", reason="needs the openai extra")

from damc_core.counterfactual import AblationProblem, ScoreRequest
from damc_core.counterfactual.llama_cpp import LlamaCppScorer
from damc_core.counterfactual.openai_endpoint import (
    OpenAICompatibleScorer,
    continuation_tokens,
)
from damc_core.errors import ConfigError

# llama-cpp-python pairs each echoed token with the logits *after* it when the model adds no BOS
# token (SmolLM2 adds none); a prompt that opens with the BOS text, as a chat frame does, is scored right.
PROBLEM = AblationProblem(
    card_ids=("c2", "c3"),
    card_texts=(
        "[c2] get_user_details(user_id=mia_li_3668) -> payment_methods: credit_card_7815826 (visa)",
        "[c3] user: Yes, book HAT069.",
    ),
    head="<|im_start|>system\nMemory cards:\n",
    tail="\nNext tool call:",
    action=" book_reservation(flight_number=HAT069, payment_id=credit_card_7815826)",
)


def test_the_endpoint_echoes_prompt_log_probabilities_that_agree_with_the_in_process_scorer(
    completion_server,
):
    endpoint = OpenAICompatibleScorer("smollm2", base_url=completion_server)
    # the space at the context's end moves to the action, so both scorers read the same split
    spaced = ScoreRequest(PROBLEM.context([True, True]) + " ", PROBLEM.action[1:])
    requests = [PROBLEM.request([True, True]), PROBLEM.request([False, True]), spaced]

    remote = endpoint.score(requests)
    with LlamaCppScorer(n_ctx=512) as local_scorer:
        local = local_scorer.score(requests)

    assert endpoint.name == "openai-completions:smollm2"
    assert remote == pytest.approx(local, abs=0.05)
    assert remote[0] - remote[1] > 5.0  # without the card holding the payment id the call is unlikely


def test_the_endpoint_reads_the_action_token_by_token_as_the_in_process_scorer_does(completion_server):
    request = PROBLEM.request([True, True])
    (remote,) = OpenAICompatibleScorer("smollm2", base_url=completion_server).token_log_probs([request])
    with LlamaCppScorer(n_ctx=512) as local_scorer:
        (local,) = local_scorer.token_log_probs([request])

    assert remote.ends == local.ends
    assert remote.log_probs == pytest.approx(local.log_probs, abs=0.05)


def test_a_bos_text_makes_a_server_that_needs_one_score_any_prompt(completion_server):
    context, action = "user: book HAT069 with my visa\nNext tool call:", " book_reservation(HAT069)"
    transcript = ScoreRequest(context, action)
    with LlamaCppScorer(n_ctx=512) as local_scorer:
        (local,) = local_scorer.score([ScoreRequest("<|im_start|>" + context, action)])

    (bare,) = OpenAICompatibleScorer("smollm2", base_url=completion_server).score([transcript])
    (led,) = OpenAICompatibleScorer("smollm2", base_url=completion_server, bos_text="<|im_start|>").score(
        [transcript]
    )

    assert led == pytest.approx(local, abs=0.05)
    assert abs(bare - local) > 5.0  # llama-cpp-python's server, on a model that adds no BOS token


def summed(*args: object, **kwargs: object) -> float:
    """What the scorer scores: the continuation tokens' log-probabilities, added up."""
    return sum(continuation_tokens(*args, **kwargs).log_probs)  # type: ignore[arg-type]


def test_continuation_tokens_are_counted_back_from_the_end_of_the_prompt():
    tokens = ["<|im_start|>", "Next", " tool", " call", ":", " book", "_res", "ervation", "("]
    log_probs = [None, -4.0, -3.0, -1.0, -0.5, -1.0, -2.0, -0.5, -9.0]

    # " book_reservation" is 17 characters; "(" was generated
    assert summed(tokens, log_probs, continuation_chars=17, generated=1) == -3.5
    # an endpoint that stopped at once generated nothing
    assert summed(tokens[:-1], log_probs[:-1], continuation_chars=17, generated=0) == -3.5
    # a token that straddles the end of the context belongs to the continuation (":" of ": book_...")
    assert summed(tokens, log_probs, continuation_chars=16, generated=1) == -3.5
    assert summed(tokens, log_probs, continuation_chars=18, generated=1) == -4.0


def test_an_empty_continuation_is_refused_before_any_request(completion_server):
    endpoint = OpenAICompatibleScorer("smollm2", base_url=completion_server)
    with pytest.raises(ValueError, match="continuation is empty"):
        endpoint.score([ScoreRequest("Next tool call:", "")])


def test_settings_are_checked_when_the_scorer_is_made():
    with pytest.raises(ConfigError, match="base_url"):
        OpenAICompatibleScorer("smollm2")
    with pytest.raises(ConfigError, match="model"):
        OpenAICompatibleScorer("", base_url="http://127.0.0.1:9/v1")


@pytest.mark.parametrize(
    ("setting", "match"),
    [
        ({"bos_text": None}, "bos_text must be text"),
        ({"timeout": "30"}, "timeout must be > 0 seconds"),
        ({"timeout": 0}, "timeout must be > 0 seconds"),
    ],
)
def test_settings_read_from_a_config_file_are_checked_when_the_scorer_is_made(setting, match):
    """Each would pass unchecked and fail at the first score, inside the agent's step."""
    import openai

    client = openai.OpenAI(api_key="local", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=match):
        OpenAICompatibleScorer("smollm2", client=client, **setting)


def test_the_timeout_given_holds_for_a_client_passed_in():
    """The caller's own client keeps the ``openai`` package's 10 minutes a try unless the scorer's
    ``timeout`` applies to it."""
    import socket
    import time

    import openai

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        client = openai.OpenAI(
            api_key="local", base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1", max_retries=0
        )
        scorer = OpenAICompatibleScorer("smollm2", client=client, timeout=0.5)

        started = time.monotonic()
        with pytest.raises(openai.APITimeoutError):
            scorer.score([ScoreRequest("Next tool call:", " book_reservation(HAT069)")])

    assert time.monotonic() - started < 5
    assert client.timeout == openai.DEFAULT_TIMEOUT  # the caller's client itself is left as it was


def test_a_prompt_longer_than_the_server_context_is_context_too_long(completion_server):
    from damc_core.counterfactual import ContextTooLong

    endpoint = OpenAICompatibleScorer("smollm2", base_url=completion_server)  # n_ctx 512
    with pytest.raises(ContextTooLong, match="maximum context length"):
        endpoint.score([ScoreRequest("hello world " * 400, " ok")])


def test_llama_cpps_server_refusing_a_prompt_longer_than_its_context_is_context_too_long():
    """llama.cpp's own server (not llama-cpp-python's) words it differently; as its answer, recorded."""
    import httpx
    import openai

    from damc_core.counterfactual import ContextTooLong

    sent: list[httpx.Request] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        error = {
            "code": 400,
            "message": "the request exceeds the available context size, try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 1203,
            "n_ctx": 512,
        }
        return httpx.Response(400, json={"error": error})

    client = openai.OpenAI(
        api_key="local",
        base_url="http://llama-server.local/v1",
        http_client=httpx.Client(transport=httpx.MockTransport(refuse)),
        max_retries=0,
    )
    endpoint = OpenAICompatibleScorer("smollm2", client=client)
    with pytest.raises(ContextTooLong, match="exceeds the available context size"):
        endpoint.score([ScoreRequest("hello world " * 400, " ok")])
    assert len(sent) == 1


def test_a_continuation_with_multibyte_characters_is_scored_as_the_in_process_scorer_does(
    completion_server,
):
    """The server echoes the byte pieces of 東, é or an emoji as empty tokens; their offsets still
    place them in the continuation."""
    request = ScoreRequest(PROBLEM.head + "Next tool call:", " book(name=José Müller, city=東京, note=🙂)")
    endpoint = OpenAICompatibleScorer("smollm2", base_url=completion_server)
    with LlamaCppScorer(n_ctx=512) as local_scorer:
        local = local_scorer.score([request])

    assert endpoint.score([request]) == pytest.approx(local, abs=0.05)


def test_offsets_place_empty_byte_tokens_and_ignore_special_tokens_left_out():
    # as llama.cpp's server echoes "<|im_start|>call: 東)" (the special token has no offset)
    tokens = ["call", ":", " ", "", "", ")", "\n"]
    offsets = [0, 4, 5, 6, 6, 7, 8]
    log_probs = [None, -1.0, -2.0, -3.0, -4.0, -5.0, -9.0]

    by_offset = summed(tokens, log_probs, continuation_chars=3, generated=1, offsets=offsets)
    assert by_offset == -14.0  # " ", the two pieces of 東, ")"
    # the pieces end where 東 starts; the token after them ends the continuation
    assert continuation_tokens(tokens, log_probs, 3, generated=1, offsets=offsets).ends == (1, 1, 1, 3)
    # by token text alone the pieces count nothing, and ":" of the context is taken in
    assert summed(tokens, log_probs, continuation_chars=3, generated=1) == -15.0


def test_a_prompt_ending_in_a_character_echoed_as_empty_byte_pieces_counts_it_whether_or_not_tokens_follow():
    # "call: 東", the continuation " 東": the server echoes 東 as two empty byte pieces at its offset
    tokens, offsets, log_probs = ["call", ":", " ", "", ""], [0, 4, 5, 6, 6], [None, -1.0, -2.0, -3.0, -4.0]

    alone = summed(tokens, log_probs, continuation_chars=2, generated=0, offsets=offsets)
    followed = summed(
        [*tokens, "\n"], [*log_probs, -9.0], continuation_chars=2, generated=1, offsets=[*offsets, 7]
    )

    assert alone == followed == -9.0


def test_a_scoring_server_that_stopped_answering_holds_a_step_for_one_decision_only(make_memory, msg, caplog):
    """Decisions are valued in the step whose result completes a batch; against a server that took
    the connection and never replies, the first timeout ends the batch instead of one per decision."""
    import socket

    import openai

    from damc_core.counterfactual import LeaveOneOut, model_valuation
    from damc_core.counterfactual.valuator import CounterfactualValuator

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        client = openai.OpenAI(
            api_key="local",
            base_url=f"http://127.0.0.1:{silent.getsockname()[1]}/v1",
            max_retries=0,
            timeout=0.5,
        )
        scorer = OpenAICompatibleScorer("smollm2", client=client, bos_text="<|im_start|>")
        valuator = CounterfactualValuator(
            value_decision=model_valuation(LeaveOneOut(), scorer), batch_every=3
        )
        memory = make_memory(valuator=valuator)
        memory.observe(msg.user("Book HAT069 for mia_li_3668"))
        with caplog.at_level("WARNING", logger="damc"):
            for step, tool in enumerate(("get_user_details", "search_direct_flight", "book_reservation")):
                memory.build(budget=400)
                memory.observe(msg.call(f"call_{step}", tool, {"user_id": "mia_li_3668"}))
                memory.observe(msg.result(f"call_{step}", tool, {"status": "ok", "step": step}))

    assert valuator.pending == 0 and len(valuator.book) == 0  # the agent went on
    # the first decision, a user turn alone, has no card to leave out: it needs no model
    assert caplog.text.count("could not value decision") == 1
    assert "at seq 3 (Request timed out.); the batch ends here, 1 left unvalued" in caplog.text
