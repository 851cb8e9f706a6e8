"""LlamaCppScorer with the bundled SmolLM2-135M-Instruct GGUF, run for real on the CPU."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp", reason="needs the counterfactual extra: pip install 'damc[counterfactual]'")

from damc_core.counterfactual import AblationProblem, ContextTooLong, ScoreRequest
from damc_core.counterfactual.estimators import AblationSurrogate, CoarseToFine, CopyAttribution, LeaveOneOut
from damc_core.counterfactual.llama_cpp import LlamaCppScorer, bundled_model_path
from damc_core.errors import ConfigError

BOOKING = AblationProblem(
    card_ids=("c2", "c3", "c4", "c5"),
    card_texts=(
        "[c2] get_user_details(user_id=mia_li_3668) -> name=Mia Li; membership=gold; payment_methods: "
        "credit_card_7815826 (visa, last four 7447); certificate_4856383 (amount 100)",
        "[c3] search_direct_flight(origin=JFK, destination=SEA, date=2024-05-20) -> "
        "HAT069 06:00 economy $121; HAT083 01:00 economy sold out",
        "[c4] assistant: HAT069 departs at 06:00 and costs $121 in economy.",
        "[c5] user: Yes, please book it.",
    ),
    head="You are an airline agent. Book what the user asks.\n\nMemory cards:\n"
    "[c1] user: Book flight HAT069 on 2024-05-20 and pay with my visa credit card.\n",
    tail="\nNext tool call:",
    action=" book_reservation(flight_number=HAT069, date=2024-05-20, payment_id=credit_card_7815826)",
)
"""The payment id of the action appears in one card only (c2); the flight is named in three."""


@pytest.fixture(scope="session")
def scorer():
    with LlamaCppScorer(n_ctx=1024) as opened:
        yield opened


def test_the_bundled_model_is_found_in_the_installed_package(scorer):
    assert bundled_model_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert scorer.name == "llama.cpp:SmolLM2-135M-Instruct.Q4_1"


def test_leaving_out_the_only_card_with_the_payment_id_costs_the_action_most(scorer):
    values = LeaveOneOut().estimate(BOOKING, scorer)
    by_card = dict(zip(values.card_ids, values.values, strict=True))

    assert values.full < 0
    assert by_card["c2"] > 5.0
    assert all(abs(by_card[c]) < by_card["c2"] / 3 for c in ("c3", "c4", "c5"))


def test_cheaper_estimators_agree_on_the_card_that_matters(scorer):
    coarse = CoarseToFine(branching=2, threshold=1.0).estimate(BOOKING, scorer)
    surrogate = AblationSurrogate(ablations=3, drop_fraction=0.5, seed=1).estimate(BOOKING, scorer)

    for values in (coarse, surrogate):
        assert max(zip(values.values, values.card_ids, strict=True))[1] == "c2", values
    assert surrogate.passes == 4


def test_copy_attribution_finds_the_card_the_payment_id_comes_from_in_two_passes(scorer):
    exact = LeaveOneOut().estimate(BOOKING, scorer)
    copied = CopyAttribution().estimate(BOOKING, scorer)

    assert copied.passes == 2 and copied.full == exact.full
    ranked = [card for _, card in sorted(zip(copied.values, copied.card_ids, strict=True), reverse=True)]
    assert ranked[0] == "c2" == max(zip(exact.values, exact.card_ids, strict=True))[1]


def test_token_log_probs_sum_to_the_score_and_end_where_the_action_does(scorer):
    request = ScoreRequest("Pay with:", " café_card_7 🙂")
    (tokens,) = scorer.token_log_probs([request])

    assert sum(tokens.log_probs) == pytest.approx(scorer.score([request])[0], abs=1e-6)
    assert list(tokens.ends) == sorted(tokens.ends) and tokens.ends[-1] == len(request.continuation)
    assert len(" café") in tokens.ends  # "é" is two bytes; the word still ends on a token's end


def test_reusing_the_cached_prefix_gives_the_numbers_of_a_fresh_pass_for_less_work(scorer):
    masks = [[True] * 4] + [[i != j for i in range(4)] for j in reversed(range(4))]
    requests = [BOOKING.request(mask) for mask in masks]

    scorer.reuse_prefix = False
    before = scorer.evaluated_tokens
    fresh = scorer.score(requests)
    fresh_tokens = scorer.evaluated_tokens - before
    scorer.reuse_prefix = True
    before = scorer.evaluated_tokens
    reused = scorer.score(requests)
    reused_tokens = scorer.evaluated_tokens - before

    assert reused == pytest.approx(fresh, abs=1e-3)
    assert reused_tokens < fresh_tokens / 2


def test_results_come_back_in_request_order_whatever_order_they_are_evaluated_in(scorer):
    a = BOOKING.request([True, True, True, True])
    b = BOOKING.request([False, True, True, True])

    one_by_one = [scorer.score([a])[0], scorer.score([b])[0]]
    assert scorer.score([b, a]) == pytest.approx(one_by_one[::-1], abs=1e-3)


def test_a_space_at_the_end_of_the_context_is_scored_as_the_start_of_the_action(scorer):
    """A context ending in a space would measure a split of `` book`` that no model writes."""
    context = BOOKING.context([True] * 4)
    shifted = ScoreRequest(context + " ", BOOKING.action[1:])

    assert (shifted.context, shifted.continuation) == (context, BOOKING.action)
    unshifted = ScoreRequest(context, BOOKING.action)
    assert scorer.score([shifted]) == pytest.approx(scorer.score([unshifted]), abs=1e-3)


def test_text_cut_inside_an_emoji_is_scored_with_a_replacement_character(scorer):
    context = BOOKING.context([True] * 4)
    cut = scorer.score([ScoreRequest(context + "\ud83d", BOOKING.action)])[0]
    replaced = scorer.score([ScoreRequest(context + "\ufffd", BOOKING.action)])[0]

    assert cut == pytest.approx(replaced)


def test_bad_requests_and_settings_get_clear_errors(scorer, tmp_path):
    with pytest.raises(ValueError, match="continuation is empty"):
        scorer.score([ScoreRequest("Next tool call:", "")])
    with pytest.raises(ValueError, match="n_ctx=1024"):
        scorer.score([ScoreRequest("flight HAT069 " * 800, " book")])
    with pytest.raises(ConfigError, match="no GGUF model file"):
        LlamaCppScorer(tmp_path / "missing.gguf")
    not_a_model = tmp_path / "notes.gguf"
    not_a_model.write_text("not a model")
    with pytest.raises(ConfigError, match="cannot load"):
        LlamaCppScorer(not_a_model)
    assert scorer.score([BOOKING.request([True] * 4)])[0] < 0  # still usable after refusing


def test_n_ctx_is_capped_at_the_length_the_model_was_trained_on():
    with LlamaCppScorer(n_ctx=20_000) as scorer:
        assert scorer.n_ctx == 8192  # SmolLM2-135M's training length
        with pytest.raises(ContextTooLong, match="n_ctx=8192"):
            scorer.score([ScoreRequest("flight HAT069 " * 3000, " book")])


def test_a_request_longer_than_one_batch_is_evaluated_in_chunks_with_the_same_result(scorer):
    request = BOOKING.request([True, False, False, True])
    with LlamaCppScorer(n_ctx=64) as small_batches:  # llama.cpp rounds n_ctx up and caps n_batch at it
        assert small_batches.n_batch < len(small_batches.tokens(request)[0]) <= small_batches.n_ctx
        chunked = small_batches.score([request])

    assert chunked == pytest.approx(scorer.score([request]), abs=1e-3)


def test_a_closed_scorer_refuses_work_instead_of_crashing():
    closed = LlamaCppScorer(n_ctx=64)
    closed.close()
    closed.close()

    with pytest.raises(RuntimeError, match="after close"):
        closed.score([BOOKING.request([True] * 4)])


def test_weights_stay_out_of_amx_buffers_when_the_build_has_amx(monkeypatch):
    import llama_cpp

    from damc_core.counterfactual.llama_cpp import _model_params

    # AMX kernels crash with a general protection fault on many virtual machines; the scorer
    # must not take the agent down on a build that has them.
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | AMX_INT8 = 1 |")
    assert _model_params(llama_cpp).use_extra_bufts is False
    monkeypatch.setattr(llama_cpp, "llama_print_system_info", lambda: b"CPU : AVX2 = 1 | FMA = 1 |")
    assert _model_params(llama_cpp).use_extra_bufts is True
