"""Counterfactual valuation: a card is worth the log-probability the right next action loses without it.

Stages, each a small protocol with default implementations:

* :class:`LogProbScorer` measures ``log P(continuation | context)`` with a language model;
* an estimator turns an :class:`AblationProblem` (cards, the context around them, the gold action)
  into one value per card, from exact leave-one-out or from fewer, cheaper ablations.
"""

from .problem import AblationProblem, CardValues, ScoreRequest
from .scorer import LogProbScorer

__all__ = ["AblationProblem", "CardValues", "LogProbScorer", "ScoreRequest"]
