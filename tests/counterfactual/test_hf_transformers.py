"""TransformersScorer on the bundled SmolLM2 GGUF, dequantized by transformers: same model, second runtime."""

from __future__ import annotations

import pytest

from damc_core.counterfactual import AblationProblem
from damc_core.counterfactual.hf_transformers import TransformersScorer
from damc_core.counterfactual.llama_cpp import LlamaCppScorer, bundled_model_path
from damc_core.errors import ConfigError

for module in ("torch", "transformers", "accelerate", "gguf", "llama_cpp"):
    pytest.importorskip(
        module,
        reason="TransformersScorer's test reads the bundled GGUF through transformers: "
        "pip install torch==2.13.0 -e '.[transformers]' (a CPU build of torch, as CI installs it)",
    )

PROBLEM = AblationProblem(
    card_ids=("c2", "c3"),
    card_texts=(
        "[c2] get_user_details(user_id=mia_li_3668) -> payment_methods: credit_card_7815826 (visa)",
        "[c3] user: Yes, book HAT069.",
    ),
    head="Memory cards:\n",
    tail="\nNext tool call:",
    action=" book_reservation(flight_number=HAT069, payment_id=credit_card_7815826)",
)


@pytest.fixture(scope="module")
def scorer():
    path = bundled_model_path()
    return TransformersScorer(path.parent, gguf_file=path.name)


def test_transformers_and_llama_cpp_measure_the_same_card_effect(scorer):
    requests = [PROBLEM.request([True, True]), PROBLEM.request([False, True]), PROBLEM.request([True, False])]

    hf = scorer.score(requests)
    with LlamaCppScorer(n_ctx=512) as llama:
        native = llama.score(requests)

    assert scorer.name == "transformers:SmolLM2-135M-Instruct.Q4_1.gguf"
    assert hf[0] - hf[1] > 5.0  # the card with the payment id matters
    assert hf == pytest.approx(native, abs=1.0)  # f32 dequantized weights against llama.cpp's Q4_1 kernels


def test_token_log_probs_match_llama_cpp_token_for_token(scorer):
    request = PROBLEM.request([True, True])
    (hf,) = scorer.token_log_probs([request])
    with LlamaCppScorer(n_ctx=512) as llama:
        (native,) = llama.token_log_probs([request])

    assert hf.ends == native.ends and hf.ends[-1] == len(request.continuation)
    assert hf.log_probs == pytest.approx(native.log_probs, abs=0.5)
    assert sum(hf.log_probs) == pytest.approx(scorer.score([request])[0])


def test_prefix_reuse_matches_a_fresh_pass(scorer):
    requests = [PROBLEM.request([True, True]), PROBLEM.request([True, False])]
    scorer.reuse_prefix = False
    fresh = scorer.score(requests)
    scorer.reuse_prefix = True
    assert scorer.score(requests) == pytest.approx(fresh, abs=1e-3)


def test_a_path_that_is_not_a_model_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not a model directory"):
        TransformersScorer(tmp_path / "missing")
    with pytest.raises(ConfigError, match="no GGUF file"):
        TransformersScorer(tmp_path, gguf_file="missing.gguf")


def test_threads_sharing_a_scorer_get_the_figures_one_thread_gets(scorer):
    import concurrent.futures

    requests = [PROBLEM.request([True, True]), PROBLEM.request([False, True])]
    alone = scorer.score(requests)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        shared = list(pool.map(lambda _: scorer.score(requests), range(8)))

    for figures in shared:
        assert figures == pytest.approx(alone, abs=1e-3)


def test_a_failed_pass_leaves_the_scorer_usable(scorer):
    request = PROBLEM.request([True, True])
    expected = scorer.score([request])
    model = scorer.model

    class FailingModel:
        config = model.config

        def __call__(self, **inputs):
            raise RuntimeError("out of memory")

    scorer.model = FailingModel()
    with pytest.raises(RuntimeError):
        scorer.score([PROBLEM.request([True, False])])
    scorer.model = model

    assert scorer.score([request]) == pytest.approx(expected, abs=1e-3)
