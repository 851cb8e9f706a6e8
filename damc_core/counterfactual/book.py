"""Counterfactual values of past decisions, and the estimate they give for the next one.

Measuring a card's value takes model passes, so it is done in batch for decisions already made
(a card's *value vector*: one entry per past decision it was part of). The next decision gets,
with no model call, the similarity-weighted mean of that vector: past decisions about the same
entities (shared exact focus terms) count most.
"""

from __future__ import annotations

import json
import math
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceError
from ..types import Namespace
from .problem import CardValues

SIMILARITY_FLOOR = 0.05
"""Weight of a past decision that shares no focus term: unrelated decisions still say something
about a card (the user's profile matters to most of them), but little."""


@dataclass(frozen=True, slots=True)
class ValuedDecision:
    """One past decision and the counterfactual value of each card it was made from."""

    namespace: Namespace
    seq: int
    """``seq`` of the call: only decisions before the current event inform its estimate."""
    terms: frozenset[str]
    """The decision focus terms at the time, compared with the current focus."""
    values: Mapping[str, float]
    """Card id -> log-probability (nats) the right action lost without the card."""
    source: str
    """Estimator and scorer that measured it, e.g. ``loo/llama.cpp:SmolLM2-135M-Instruct``."""

    @classmethod
    def of(
        cls, namespace: Namespace, seq: int, terms: Iterable[str], values: CardValues, scorer: str
    ) -> ValuedDecision:
        return cls(
            namespace,
            seq,
            frozenset(terms),
            dict(zip(values.card_ids, values.values, strict=True)),
            values.source(scorer),
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    """A card's expected value for the current decision, from the past decisions that valued it."""

    nats: float
    """Similarity-weighted mean drop in log-probability."""
    decisions: int
    """How many past decisions valued the card (the evidence behind the estimate)."""
    similarity: float
    """Highest similarity of those decisions to the current one, in (0, 1]."""
    sources: tuple[str, ...]


def similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard overlap of two focus term sets, never below ``SIMILARITY_FLOOR``."""
    union = len(a | b)
    return max(SIMILARITY_FLOOR, len(a & b) / union) if union else SIMILARITY_FLOOR


class ValueBook:
    """Valued decisions by namespace; thread-safe, since batches may run beside the agent."""

    def __init__(self, decisions: Iterable[ValuedDecision] = ()) -> None:
        self._by_namespace: defaultdict[Namespace, list[ValuedDecision]] = defaultdict(list)
        self._lock = threading.Lock()
        self.version = 0
        """Grows with every added decision, so cached estimates know they are out of date."""
        for decision in decisions:
            self.add(decision)

    def add(self, decision: ValuedDecision) -> None:
        with self._lock:
            self._by_namespace[decision.namespace].append(decision)
            self.version += 1

    def decisions(self, namespace: Namespace, *, before: int | None = None) -> list[ValuedDecision]:
        with self._lock:
            found = list(self._by_namespace.get(namespace, ()))
        return found if before is None else [d for d in found if d.seq < before]

    def __len__(self) -> int:
        with self._lock:
            return sum(len(found) for found in self._by_namespace.values())

    def estimate(
        self, namespace: Namespace, card_ids: Iterable[str], *, terms: frozenset[str], before: int
    ) -> dict[str, Estimate]:
        """Each card's similarity-weighted mean value over the decisions made before ``before``,
        in one pass over those decisions' values (not one per card: a long session holds
        hundreds of both)."""
        wanted = dict.fromkeys(card_ids)
        found: defaultdict[str, list[tuple[ValuedDecision, float]]] = defaultdict(list)
        for decision in self.decisions(namespace, before=before):
            weight = similarity(terms, decision.terms)
            for card_id in wanted.keys() & decision.values.keys():
                found[card_id].append((decision, weight))
        out = {}
        for card_id in wanted:
            if not (weighted := found.get(card_id)):
                continue
            nats = sum(d.values[card_id] * w for d, w in weighted) / sum(w for _, w in weighted)
            if math.isfinite(nats):
                sources = tuple(sorted({d.source for d, _ in weighted}))
                out[card_id] = Estimate(nats, len(weighted), max(w for _, w in weighted), sources)
        return out

    # -- files -----------------------------------------------------------------------------------
    def write_jsonl(self, path: str | Path) -> None:
        with self._lock:  # a snapshot: valuation may go on adding while the file is written
            decisions = [d for held in self._by_namespace.values() for d in held]
        with Path(path).open("w", encoding="utf-8") as handle:
            for d in decisions:
                handle.write(json.dumps(decision_line(d), ensure_ascii=False) + "\n")

    @classmethod
    def read_jsonl(
        cls, path: str | Path, *, namespace_of: Callable[[Mapping[str, object]], Namespace] | None = None
    ) -> ValueBook:
        """Load values written by ``damc value`` (one decision per line).

        Lines carry ``traj``/``step`` (a replay) or ``user``/``session``/``seq``; ``namespace_of``
        maps a line to its namespace (default: the one ``damc replay`` gives trajectory ``traj``).
        """
        namespace_of = namespace_of or replay_namespace
        book = cls()
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise TraceError(f"cannot read values file {path}: {exc}") from exc
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
                values = {str(k): float(v) for k, v in zip(item["card_ids"], item["values"], strict=True)}
                seq = int(item["step"] if "step" in item else item["seq"])
                decision = ValuedDecision(
                    namespace_of(item), seq, frozenset(item.get("terms", ())), values, str(item["source"])
                )
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                raise TraceError(
                    f"{path}:{number}: not a values line ({type(exc).__name__}: {exc}); "
                    "expected the output of `damc value`"
                ) from exc
            book.add(decision)
        return book


def replay_namespace(item: Mapping[str, object]) -> Namespace:
    """The namespace of a values line: as ``damc replay`` names trajectory ``traj``, or as written."""
    if "traj" in item:
        return Namespace(user="replay", session=f"traj-{item['traj']}")
    return Namespace(user=str(item["user"]), session=str(item["session"]))


def decision_line(decision: ValuedDecision) -> dict[str, object]:
    """The JSON object of one valued decision in a values file."""
    ids = list(decision.values)
    return {
        "user": decision.namespace.user,
        "session": decision.namespace.session,
        "seq": decision.seq,
        "terms": sorted(decision.terms),
        "card_ids": ids,
        "values": [decision.values[i] for i in ids],
        "source": decision.source,
    }
