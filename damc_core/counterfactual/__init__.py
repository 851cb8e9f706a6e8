"""Counterfactual valuation: a card is worth the log-probability the right next action loses without it.

Stages, each a small protocol with default implementations:

* :class:`LogProbScorer` measures ``log P(continuation | context)`` with a language model
  (:class:`LlamaCppScorer`, local and offline by default; :class:`TransformersScorer`;
  :class:`OpenAICompatibleScorer` for a served model);
* an :class:`Estimator` turns an :class:`AblationProblem` (cards, the context around them, the gold
  action) into one value per card, from exact leave-one-out (:class:`LeaveOneOut`) or from fewer,
  cheaper ablations (:class:`AblationSurrogate`, :class:`CoarseToFine`), or in two passes from
  which cards spell the words of the action (:class:`CopyAttribution`, with a
  :class:`TokenLogProbScorer`).

:func:`problem_from_replay` makes the ablation problem of a replayed decision point.
:class:`CounterfactualValuator` brings the values of past decisions to the next one with no model
call; :class:`LLMJudgeValuator` asks a chat model instead; :func:`decision_likelihood` measures a
context by the log-probability of the right action.
"""

from .batch import model_valuation
from .book import ValueBook, ValuedDecision
from .estimators import AblationSurrogate, CoarseToFine, CopyAttribution, Estimator, LeaveOneOut
from .gold import gold_action
from .hf_transformers import TransformersScorer
from .judge import JudgeModel, LLMJudgeValuator, OpenAIJudge
from .likelihood import decision_likelihood
from .llama_cpp import LlamaCppScorer, bundled_model_path
from .openai_endpoint import OpenAICompatibleScorer
from .problem import AblationProblem, CardValues, ScoreRequest
from .problems import action_succeeded, action_text, problem_from_history, problem_from_replay
from .scorer import ContextTooLong, LogProbScorer, TokenLogProbs, TokenLogProbScorer
from .valuator import Blend, CounterfactualValuator

__all__ = [
    "AblationProblem",
    "AblationSurrogate",
    "Blend",
    "CardValues",
    "CoarseToFine",
    "ContextTooLong",
    "CopyAttribution",
    "CounterfactualValuator",
    "Estimator",
    "JudgeModel",
    "LLMJudgeValuator",
    "LeaveOneOut",
    "LlamaCppScorer",
    "LogProbScorer",
    "OpenAICompatibleScorer",
    "OpenAIJudge",
    "ScoreRequest",
    "TokenLogProbScorer",
    "TokenLogProbs",
    "TransformersScorer",
    "ValueBook",
    "ValuedDecision",
    "action_succeeded",
    "action_text",
    "bundled_model_path",
    "decision_likelihood",
    "gold_action",
    "model_valuation",
    "problem_from_history",
    "problem_from_replay",
]
