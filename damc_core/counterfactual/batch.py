"""Valuing recorded decisions with a model: the batch side of ``CounterfactualValuator``."""

from __future__ import annotations

from ..value import ObservedDecision
from .book import ValuedDecision
from .estimators import Estimator
from .problems import problem_from_history
from .scorer import LogProbScorer
from .valuator import ValueDecision


def model_valuation(estimator: Estimator, scorer: LogProbScorer) -> ValueDecision:
    """A ``value_decision`` for :class:`~.valuator.CounterfactualValuator` that runs ``estimator``.

    The decision is rebuilt as an ablation problem from its history; its cards are renamed to the
    live memory's card ids (the problem numbers them afresh), so estimates land on the right cards.
    """

    def run(decision: ObservedDecision) -> ValuedDecision | None:
        problem = problem_from_history(decision.history, decision.action, system=decision.system)
        if not problem.card_ids:
            return None
        offset = 1 if decision.system else 0  # the problem observes the system prompt first
        live = {f"c{index + offset}": card_id for index, card_id in enumerate(decision.card_ids)}
        values = estimator.estimate(problem, scorer)
        return ValuedDecision(
            decision.namespace,
            decision.seq,
            decision.built.focus.terms,
            {live[i]: v for i, v in zip(values.card_ids, values.values, strict=True) if i in live},
            values.source(scorer.name),
        )

    return run
