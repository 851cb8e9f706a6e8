"""Cards copied with a few fields changed, as every event and decision does."""

from __future__ import annotations

import dataclasses

import pytest

from damc_core.types import Card, CardKind, Score, updated


def _card() -> Card:
    return Card(
        id="c3",
        record_id="r3",
        seq=3,
        created_at=1_700_000_000.0,
        kind=CardKind.TOOL_RESULT,
        summary="[c3] get_reservation_details(reservation_id=M20IZO) -> status=active",
        tool_name="get_reservation_details",
        arguments={"reservation_id": "M20IZO"},
        terms=frozenset({"m20izo", "active"}),
    )


def test_a_copy_with_changes_is_what_dataclasses_replace_makes():
    card = _card()
    changes = {
        "summary": "[c3] get_reservation_details -> (more)",
        "tokens": 9,
        "scores": (Score("prior", 0.4, "cold-start prior"),),
        "decision_links": ("c5",),
        "used_terms": frozenset({"m20izo"}),
    }

    copy = updated(card, **changes)

    assert copy == dataclasses.replace(card, **changes)
    assert card.summary.endswith("status=active") and card.tokens == 0  # the original is untouched


def test_a_copy_is_frozen_and_refuses_fields_cards_do_not_have():
    copy = updated(_card(), tokens=4)

    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.tokens = 5  # type: ignore[misc]
    with pytest.raises(TypeError, match="no field 'token'"):
        updated(copy, token=4)
