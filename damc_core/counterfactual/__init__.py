"""Counterfactual valuation: a card is worth the log-probability the right next action loses without it.

Stages, each a small protocol with default implementations:

* :class:`LogProbScorer` measures ``log P(continuation | context)`` with a language model
  (:class:`LlamaCppScorer`, local and offline by default; :class:`TransformersScorer`;
  :class:`OpenAICompatibleScorer` for a served model);
* an :class:`Estimator` turns an :class:`AblationProblem` (cards, the context around them, the gold
  action) into one value per card, from exact leave-one-out (:class:`LeaveOneOut`) or from fewer,
  cheaper ablations (:class:`AblationSurrogate`, :class:`CoarseToFine`).

:func:`problem_from_replay` makes the ablation problem of a replayed decision point.
"""

from .estimators import AblationSurrogate, CoarseToFine, Estimator, LeaveOneOut
from .hf_transformers import TransformersScorer
from .llama_cpp import LlamaCppScorer, bundled_model_path
from .openai_endpoint import OpenAICompatibleScorer
from .problem import AblationProblem, CardValues, ScoreRequest
from .problems import action_succeeded, action_text, problem_from_history, problem_from_replay
from .scorer import LogProbScorer

__all__ = [
    "AblationProblem",
    "AblationSurrogate",
    "CardValues",
    "CoarseToFine",
    "Estimator",
    "LeaveOneOut",
    "LlamaCppScorer",
    "LogProbScorer",
    "OpenAICompatibleScorer",
    "ScoreRequest",
    "TransformersScorer",
    "action_succeeded",
    "action_text",
    "bundled_model_path",
    "problem_from_history",
    "problem_from_replay",
]
