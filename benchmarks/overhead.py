"""Per-decision overhead of ``DecisionMemory`` in heuristic mode, at 1,000 and 100,000 cards.

For each size N the script prefills one namespace with N realistic events (user turns with IDs,
assistant tool calls, JSON tool results such as airline reservations and 2-10 row search lists,
some errors, some re-queries that supersede earlier results). Prefill is setup and is not part
of the decision timings. By default (``--prefill batched``) it calls ``observe`` for every event
but buffers the store writes and flushes them in bulk, which leaves the store exactly as direct
calls would; ``--prefill observe`` writes through. Its rate is reported either way: it is the
in-process cost of ``observe`` as the memory grows.

Then, ``--reps`` times: the assistant's next tool call is observed (untimed), and one *decision*
is timed: ``observe(the tool result)`` followed by ``build(budget=1000)``. Each rep adds two
cards, so N grows by ``2 * reps`` during the measurement (0.4 % at 100k with 200 reps). The
process's CPU time per decision is reported beside the wall time: on a shared machine, waiting
for other jobs inflates only the latter.

Memory per card is the growth of the process's resident set size (``/proc/self/statm``, after
``gc.collect()``) over the prefill, divided by N. It counts everything the prefill keeps alive:
cards, the term and entity indexes, the kept messages and, with ``--store memory``, the raw
records; SQLite's own page cache is included, its file is not (reported separately as disk bytes
per card). ``--tracemalloc`` measures Python allocations instead (slower prefill).

Targets the project checks: p50 <= 5 ms at 1,000 cards and <= 50 ms at 100,000 cards (2 cores).

Usage::

    python benchmarks/overhead.py                       # sizes 1000 100000, SQLite store
    python benchmarks/overhead.py --sizes 1000 --store memory --reps 500
    python benchmarks/overhead.py --json /tmp/overhead.json --profile
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import random
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import FIRST, LAST, call_message, result_message

from damc_core import DecisionMemory, InMemoryStore, MemorySettings, SQLiteStore, TiktokenCounter

TARGETS_MS = {1_000: 5.0, 100_000: 50.0}
"""p50 targets per decision; sizes in between are not checked."""

BUDGET = 1000

# -- realistic event stream ------------------------------------------------------------------------

AIRPORTS = [
    "JFK",
    "SEA",
    "SFO",
    "LAX",
    "ORD",
    "ATL",
    "DFW",
    "DEN",
    "BOS",
    "MIA",
    "PHX",
    "LAS",
    "EWR",
    "IAH",
    "MSP",
    "DTW",
    "PHL",
    "LGA",
    "CLT",
    "MCO",
]
CABINS = ["basic_economy", "economy", "business"]
PRODUCTS = [
    ("T-Shirt", ["color", "size"]),
    ("Water Bottle", ["capacity", "material"]),
    ("Running Shoes", ["size", "color"]),
    ("Desk Lamp", ["brightness", "color"]),
    ("Backpack", ["color", "size"]),
    ("Headphones", ["type", "color"]),
]
ERRORS = [
    "Error: reservation not found",
    "Error: payment method not found",
    "Error: flight {flight} not available on {date}",
    "Error: not enough seats on flight {flight}",
    "Error: user not found",
    "Error: order {order} cannot be modified (status: delivered)",
]
CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


class EventStream:
    """Deterministic endless stream of OpenAI-format messages for an airline/retail support agent.

    A pool of users, reservations and orders is reused so that IDs recur (arguments of later
    calls take values from earlier results) and re-queries supersede earlier cards.
    """

    def __init__(self, seed: int = 0, users: int = 400) -> None:
        self.rng = random.Random(seed)
        self.calls = 0
        self.users = [self._user() for _ in range(users)]
        self.reservations: dict[str, dict[str, Any]] = {}
        self.reservation_ids: list[str] = []
        self.orders: dict[str, dict[str, Any]] = {}

    # ids
    def _code(self, n: int = 6) -> str:
        return "".join(self.rng.choice(CHARS) for _ in range(n))

    def _date(self) -> str:
        return f"2024-05-{self.rng.randint(1, 30):02d}"

    def _flight_no(self) -> str:
        return f"HAT{self.rng.randint(1, 320):03d}"

    def _user(self) -> dict[str, Any]:
        first, last = self.rng.choice(FIRST), self.rng.choice(LAST)
        uid = f"{first.lower()}_{last.lower()}_{self.rng.randint(1000, 9999)}"
        payments = {
            f"credit_card_{self.rng.randint(1_000_000, 9_999_999)}": {
                "source": "credit_card",
                "brand": self.rng.choice(["visa", "mastercard"]),
                "last_four": f"{self.rng.randint(0, 9999):04d}",
            }
        }
        if self.rng.random() < 0.6:
            payments[f"gift_card_{self.rng.randint(1_000_000, 9_999_999)}"] = {
                "source": "gift_card",
                "amount": self.rng.randint(20, 400),
            }
        return {
            "user_id": uid,
            "name": {"first_name": first, "last_name": last},
            "email": f"{first.lower()}.{last.lower()}{self.rng.randint(1, 99)}@example.com",
            "dob": f"19{self.rng.randint(50, 99)}-{self.rng.randint(1, 12):02d}-1{self.rng.randint(0, 9)}",
            "membership": self.rng.choice(["regular", "silver", "gold"]),
            "payment_methods": payments,
            "reservations": [],
            "orders": [],
        }

    def _reservation(self, user: dict[str, Any]) -> dict[str, Any]:
        origin, destination = self.rng.sample(AIRPORTS, 2)
        date = self._date()
        passengers = [
            {
                "first_name": self.rng.choice(FIRST),
                "last_name": user["name"]["last_name"],
                "dob": f"19{self.rng.randint(50, 99)}-0{self.rng.randint(1, 9)}-1{self.rng.randint(0, 9)}",
            }
            for _ in range(self.rng.randint(1, 3))
        ]
        price = self.rng.randint(80, 1400)
        res = {
            "reservation_id": self._code(),
            "user_id": user["user_id"],
            "origin": origin,
            "destination": destination,
            "flight_type": self.rng.choice(["one_way", "round_trip"]),
            "cabin": self.rng.choice(CABINS),
            "flights": [
                {
                    "origin": origin,
                    "destination": destination,
                    "flight_number": self._flight_no(),
                    "date": date,
                    "price": price,
                }
            ],
            "passengers": passengers,
            "payment_history": [
                {"payment_id": next(iter(user["payment_methods"])), "amount": price * len(passengers)}
            ],
            "created_at": f"2024-05-0{self.rng.randint(1, 9)}T{self.rng.randint(0, 23):02d}:12:05",
            "total_baggages": self.rng.randint(0, 3),
            "nonfree_baggages": 0,
            "insurance": self.rng.choice(["yes", "no"]),
            "status": "confirmed",
        }
        user["reservations"].append(res["reservation_id"])
        self.reservations[res["reservation_id"]] = res
        self.reservation_ids.append(res["reservation_id"])
        return res

    def _order(self, user: dict[str, Any]) -> dict[str, Any]:
        items = []
        for _ in range(self.rng.randint(2, 5)):
            name, option_keys = self.rng.choice(PRODUCTS)
            items.append(
                {
                    "name": name,
                    "product_id": str(self.rng.randint(10**9, 10**10 - 1)),
                    "item_id": str(self.rng.randint(10**9, 10**10 - 1)),
                    "price": round(self.rng.uniform(9, 400), 2),
                    "options": {
                        k: self.rng.choice(["black", "red", "L", "M", "1000ml", "steel"]) for k in option_keys
                    },
                }
            )
        order = {
            "order_id": f"#W{self.rng.randint(1_000_000, 9_999_999)}",
            "user_id": user["user_id"],
            "items": items,
            "status": self.rng.choice(["pending", "processed", "delivered"]),
            "payment_history": [
                {
                    "transaction_type": "payment",
                    "amount": round(sum(i["price"] for i in items), 2),
                    "payment_method_id": next(iter(user["payment_methods"])),
                }
            ],
        }
        user["orders"].append(order["order_id"])
        self.orders[order["order_id"]] = order
        return order

    # messages
    def _call(self, name: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], str]:
        self.calls += 1
        call_id = f"call_{self.calls:07d}"
        return call_message(call_id, name, arguments), call_id

    @staticmethod
    def _result(name: str, call_id: str, content: object) -> dict[str, Any]:
        return result_message(call_id, name, content)

    def tool_exchange(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """One assistant tool call and its result."""
        rng = self.rng
        user = rng.choice(self.users)
        roll = rng.random()
        if roll < 0.06:  # error
            name = rng.choice(["get_reservation_details", "book_reservation", "update_reservation_flights"])
            call, cid = self._call(name, {"reservation_id": self._code(), "user_id": user["user_id"]})
            text = rng.choice(ERRORS).format(
                flight=self._flight_no(), date=self._date(), order=f"#W{rng.randint(10**6, 10**7 - 1)}"
            )
            return call, self._result(name, cid, text)
        if roll < 0.16:
            call, cid = self._call("get_user_details", {"user_id": user["user_id"]})
            body = {k: v for k, v in user.items()}
            return call, self._result("get_user_details", cid, body)
        if roll < 0.40:
            origin, destination = rng.sample(AIRPORTS, 2)
            date = self._date()
            call, cid = self._call(
                "search_direct_flight", {"origin": origin, "destination": destination, "date": date}
            )
            rows = []
            for _ in range(rng.randint(2, 10)):
                seats = {c: rng.choice([0, rng.randint(1, 20)]) for c in CABINS}
                rows.append(
                    {
                        "flight_number": self._flight_no(),
                        "origin": origin,
                        "destination": destination,
                        "scheduled_departure_time_est": f"{rng.randint(5, 22):02d}:00:00",
                        "scheduled_arrival_time_est": f"{rng.randint(5, 23):02d}:30:00",
                        "status": "available",
                        "available_seats": seats,
                        "prices": {c: rng.randint(60, 2200) for c in CABINS},
                        "date": date,
                    }
                )
            return call, self._result("search_direct_flight", cid, rows)
        if roll < 0.62 or not self.reservations:
            if user["reservations"] and rng.random() < 0.5:
                res = self.reservations[rng.choice(user["reservations"])]
                # superseding update: the same reservation re-queried with changed fields
                res["total_baggages"] = rng.randint(0, 4)
                res["nonfree_baggages"] = rng.randint(0, res["total_baggages"])
                if rng.random() < 0.2:
                    res["status"] = "cancelled"
            else:
                res = self._reservation(user)
            call, cid = self._call("get_reservation_details", {"reservation_id": res["reservation_id"]})
            return call, self._result("get_reservation_details", cid, res)
        if roll < 0.72:
            res = self.reservations[rng.choice(self.reservation_ids[-50:])]
            res["total_baggages"] += 1
            res["nonfree_baggages"] += 1
            args = {
                "reservation_id": res["reservation_id"],
                "total_baggages": res["total_baggages"],
                "nonfree_baggages": res["nonfree_baggages"],
                "payment_id": res["payment_history"][0]["payment_id"],
            }
            call, cid = self._call("update_reservation_baggages", args)
            return call, self._result("update_reservation_baggages", cid, res)
        order = (
            self.orders[rng.choice(user["orders"])]
            if user["orders"] and rng.random() < 0.4
            else self._order(user)
        )
        call, cid = self._call("get_order_details", {"order_id": order["order_id"]})
        return call, self._result("get_order_details", cid, order)

    def user_turn(self) -> dict[str, Any]:
        rng = self.rng
        user = rng.choice(self.users)
        templates = [
            "Hi, my user id is {uid}. I want to change reservation {res} to a later flight on {date}.",
            "I'm {uid}; please add a checked bag to {res} and charge it to {pay}.",
            "Can you find a direct flight from {a} to {b} on {date} in {cabin}? My id is {uid}.",
            "Order {order} arrived damaged, I want to return the items. User id {uid}.",
            "Cancel reservation {res} please, the trip was called off.",
            "yes, go ahead",
        ]
        res = rng.choice(user["reservations"]) if user["reservations"] else self._code()
        order = rng.choice(user["orders"]) if user["orders"] else f"#W{rng.randint(10**6, 10**7 - 1)}"
        a, b = rng.sample(AIRPORTS, 2)
        text = rng.choice(templates).format(
            uid=user["user_id"],
            res=res,
            date=self._date(),
            pay=next(iter(user["payment_methods"])),
            a=a,
            b=b,
            cabin=rng.choice(CABINS),
            order=order,
        )
        return {"role": "user", "content": text}

    def assistant_note(self) -> dict[str, Any]:
        res = self.rng.choice(self.reservation_ids) if self.reservation_ids else self._code()
        return {
            "role": "assistant",
            "content": f"Reservation {res} is updated. Is there anything else I can help with?",
        }

    def events(self) -> Iterator[dict[str, Any]]:
        yield {"role": "system", "content": "You are an airline and retail customer-support agent."}
        while True:
            roll = self.rng.random()
            if roll < 0.15:
                yield self.user_turn()
            elif roll < 0.20:
                yield self.assistant_note()
            else:
                call, result = self.tool_exchange()
                yield call
                yield result


# -- measurement -----------------------------------------------------------------------------------


def rss_bytes() -> int:
    """Current resident set size (Linux ``/proc``), else the peak from ``getrusage``."""
    try:
        with open("/proc/self/statm") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def make_memory(store_kind: str, directory: str, n: int) -> DecisionMemory:
    store = SQLiteStore(Path(directory) / f"bench-{n}.sqlite3") if store_kind == "sqlite" else InMemoryStore()
    return DecisionMemory(store=store, counter=TiktokenCounter(), settings=MemorySettings(budget=BUDGET))


class BufferedStore:
    """Setup-only store proxy: keeps appends and card upserts in memory and writes them to the real
    store in bulk every ``flush_every`` events, the latest version of each card once per flush.

    The store ends up with exactly the rows direct ``observe`` calls would have written; only the
    number of transactions and card serializations differs. Never used while timing decisions.
    """

    def __init__(self, inner: Any, flush_every: int = 5000) -> None:
        self.inner = inner
        self.flush_every = flush_every
        self._records: list[Any] = []
        self._cards: dict[str, Any] = {}
        self._namespace: Any = None

    def append(self, record: Any) -> None:
        self._records.append(record)
        if len(self._records) >= self.flush_every:
            self.flush()

    def put_cards(self, namespace: Any, cards: Any) -> None:
        self._namespace = namespace
        for card in cards:
            self._cards[card.id] = card

    def record(self, namespace: Any, record_id: str) -> Any:
        self.flush()
        return self.inner.record(namespace, record_id)

    def records(self, namespace: Any, *, since: int = 0) -> Any:
        self.flush()
        return self.inner.records(namespace, since=since)

    def cards(self, namespace: Any, *, since: int = 0) -> Any:
        self.flush()
        return self.inner.cards(namespace, since=since)

    def flush(self) -> None:
        for record in self._records:
            self.inner.append(record)
        if self._cards:
            self.inner.put_cards(self._namespace, list(self._cards.values()))
        self._records, self._cards = [], {}

    def close(self) -> None:
        self.flush()
        self.inner.close()


def prefill(
    memory: DecisionMemory, stream: Iterator[dict[str, Any]], n: int, *, batched: bool, progress: bool
) -> float:
    """Observe events until the memory holds ``n`` cards; returns the seconds taken.

    With ``batched`` the store writes are buffered (:class:`BufferedStore`) and the real store is
    put back before returning, so the timed decisions write through as usual.
    """
    real_store = memory.store
    buffered = BufferedStore(real_store) if batched else None
    if buffered is not None:
        memory.store = buffered
    start = time.perf_counter_ns()
    step = max(1, n // 20)
    last, last_i = start, 0
    try:
        for i in range(n):
            memory.observe(next(stream))
            if progress and (i + 1) % step == 0:
                now = time.perf_counter_ns()
                print(
                    f"  prefill {i + 1:>7}/{n}  {(now - start) / 1e9:8.1f} s  "
                    f"last {step} at {(i + 1 - last_i) / ((now - last) / 1e9):6.0f} events/s",
                    file=sys.stderr,
                    flush=True,
                )
                last, last_i = now, i + 1
        if buffered is not None:
            buffered.flush()
    finally:
        memory.store = real_store
    return (time.perf_counter_ns() - start) / 1e9


def run_size(n: int, args: argparse.Namespace, directory: str) -> dict[str, Any]:
    gc.collect()
    source = EventStream(seed=args.seed)
    stream = source.events()
    if args.tracemalloc:
        tracemalloc.start()
    # made before the baseline so the tokenizer tables and the empty store are not counted per card
    memory = make_memory(args.store, directory, n)
    gc.collect()
    rss_before = rss_bytes()
    seconds = prefill(memory, stream, n, batched=args.prefill == "batched", progress=args.progress)
    gc.collect()
    rss_after = rss_bytes()
    traced = tracemalloc.get_traced_memory()[0] if args.tracemalloc else None
    if args.tracemalloc:
        tracemalloc.stop()
    cards = len(memory.cards())
    disk = None
    if args.store == "sqlite":
        db = Path(directory) / f"bench-{n}.sqlite3"
        disk = sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))

    # the cold build fills per-card render caches; time it on its own
    t0 = time.perf_counter_ns()
    memory.build(budget=BUDGET)
    cold_build_ms = (time.perf_counter_ns() - t0) / 1e6
    for _ in range(args.warmup):
        call, result = source.tool_exchange()
        memory.observe(call)
        memory.observe(result)
        memory.build(budget=BUDGET)

    observe_ms, build_ms, decision_ms, cpu_ms, context_tokens = [], [], [], [], []
    for _ in range(args.reps):
        call, result = source.tool_exchange()
        memory.observe(call)  # the model's call arrives before its result; not part of the decision
        c0 = time.process_time_ns()
        t0 = time.perf_counter_ns()
        memory.observe(result)
        t1 = time.perf_counter_ns()
        built = memory.build(budget=BUDGET)
        t2 = time.perf_counter_ns()
        cpu_ms.append((time.process_time_ns() - c0) / 1e6)
        observe_ms.append((t1 - t0) / 1e6)
        build_ms.append((t2 - t1) / 1e6)
        decision_ms.append((t2 - t0) / 1e6)
        context_tokens.append(built.total_tokens)

    profile = None
    if args.profile and n == max(args.sizes):
        profile = profile_build(memory, source, args.profile_reps, args.profile_top)

    memory.store.close()
    result: dict[str, Any] = {
        "cards": n,
        "cards_after_measurement": len(memory.cards()),
        "store": args.store,
        "prefill_seconds": round(seconds, 2),
        "prefill_events_per_second": round(n / seconds, 1),
        "prefill_mode": args.prefill,
        "memory_per_card_bytes": round((rss_after - rss_before) / n, 1),
        "memory_method": "RSS delta over prefill / N (/proc/self/statm, after gc.collect())",
        "tracemalloc_per_card_bytes": round(traced / n, 1) if traced is not None else None,
        "sqlite_disk_per_card_bytes": round(disk / n, 1) if disk is not None else None,
        "cold_build_ms": round(cold_build_ms, 3),
        "reps": args.reps,
        "decision_ms": {
            "p50": percentile(decision_ms, 0.5),
            "p95": percentile(decision_ms, 0.95),
            "max": max(decision_ms),
            "mean": statistics.fmean(decision_ms),
        },
        "cpu_ms": {"p50": percentile(cpu_ms, 0.5), "p95": percentile(cpu_ms, 0.95)},
        "observe_ms": {"p50": percentile(observe_ms, 0.5), "p95": percentile(observe_ms, 0.95)},
        "build_ms": {"p50": percentile(build_ms, 0.5), "p95": percentile(build_ms, 0.95)},
        "mean_context_tokens": statistics.fmean(context_tokens),
        "target_p50_ms": TARGETS_MS.get(n),
        "cards_seen_at_start": cards,
    }
    if result["target_p50_ms"] is not None:
        result["target_met"] = result["decision_ms"]["p50"] <= result["target_p50_ms"]
    if profile is not None:
        result["profile"] = profile
    return result


def profile_build(memory: DecisionMemory, source: EventStream, reps: int, top: int) -> dict[str, Any]:
    """cProfile over ``reps`` decisions, builds and observes in separate profiles; damc_core only."""
    builds, observes = cProfile.Profile(), cProfile.Profile()
    for _ in range(reps):
        call, result = source.tool_exchange()
        observes.enable()
        memory.observe(call)
        memory.observe(result)
        observes.disable()
        builds.enable()
        memory.build(budget=BUDGET)
        builds.disable()
    text = io.StringIO()
    pstats.Stats(builds, stream=text).sort_stats("cumulative").print_stats(25)
    return {
        "builds": reps,
        "damc_core_by_cumulative": _damc_rows(builds, reps, top),
        "observe_damc_core_by_cumulative": _damc_rows(observes, reps, top),
        "pstats_top25": text.getvalue(),
    }


def _damc_rows(profiler: cProfile.Profile, reps: int, top: int) -> list[dict[str, Any]]:
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows = []
    for (filename, line, func), (_cc, ncalls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        if "damc_core" not in filename:
            continue
        rows.append(
            {
                "function": f"{Path(filename).parent.name}/{Path(filename).name}:{line}({func})",
                "calls_per_rep": ncalls / reps,
                "cum_ms_per_rep": cumtime * 1e3 / reps,
                "self_ms_per_rep": tottime * 1e3 / reps,
            }
        )
    rows.sort(key=lambda r: -r["cum_ms_per_rep"])
    return rows[:top]


def print_table(results: list[dict[str, Any]]) -> None:
    head = (
        f"{'cards':>8} {'store':>6} {'p50':>8} {'p95':>8} {'max':>8} {'obs p50':>8} {'bld p50':>8} "
        f"{'cpu p50':>8} {'cold':>8} {'B/card':>8} {'prefill/s':>10} {'target':>12}"
    )
    print(head)
    print("-" * len(head))
    for r in results:
        d = r["decision_ms"]
        target = r.get("target_p50_ms")
        verdict = "" if target is None else f"<={target:g} {'ok' if r['target_met'] else 'MISS'}"
        print(
            f"{r['cards']:>8} {r['store']:>6} {d['p50']:8.2f} {d['p95']:8.2f} {d['max']:8.2f} "
            f"{r['observe_ms']['p50']:8.2f} {r['build_ms']['p50']:8.2f} {r['cpu_ms']['p50']:8.2f} "
            f"{r['cold_build_ms']:8.1f} "
            f"{r['memory_per_card_bytes']:8.0f} {r['prefill_events_per_second']:10.0f} {verdict:>12}"
        )
    print(
        "times in ms; decision = observe(tool result) + build(budget=1000); cpu = the process's CPU "
        "time per decision (what other jobs on a shared machine do not inflate); "
        "B/card = RSS growth over prefill / N"
    )
    for r in results:
        if r.get("sqlite_disk_per_card_bytes") is not None:
            print(f"  {r['cards']} cards: SQLite file {r['sqlite_disk_per_card_bytes']:.0f} B/card")
        if r.get("tracemalloc_per_card_bytes") is not None:
            print(f"  {r['cards']} cards: tracemalloc {r['tracemalloc_per_card_bytes']:.0f} B/card")
        if "profile" in r:
            for label, key in (
                ("build", "damc_core_by_cumulative"),
                ("observe(call) + observe(result)", "observe_damc_core_by_cumulative"),
            ):
                print(
                    f"\ncProfile of {r['profile']['builds']} decisions at {r['cards']} cards, {label} "
                    "(damc_core functions by cumulative time, ms per decision):"
                )
                for row in r["profile"][key]:
                    print(
                        f"  {row['cum_ms_per_rep']:8.2f} cum {row['self_ms_per_rep']:8.2f} self "
                        f"{row['calls_per_rep']:9.1f} calls  {row['function']}"
                    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        default=[1_000, 100_000],
        help="cards to prefill, one run each (default: %(default)s)",
    )
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--reps", type=int, default=200, help="timed decisions per size")
    parser.add_argument("--warmup", type=int, default=5, help="untimed decisions after the cold build")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results as JSON to this path")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile the builds at the largest size and list damc_core hotspots",
    )
    parser.add_argument("--profile-reps", type=int, default=30)
    parser.add_argument("--profile-top", type=int, default=15)
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="also measure Python allocations per card (slows the prefill)",
    )
    parser.add_argument(
        "--prefill",
        choices=("batched", "observe"),
        default="batched",
        help="batched: observe() with store writes buffered and bulk-flushed (setup only); "
        "observe: observe() straight into the store, so the prefill rate is observe's",
    )
    parser.add_argument("--progress", action="store_true", help="print prefill progress to stderr")
    args = parser.parse_args(argv)
    if args.reps <= 0 or any(n <= 0 for n in args.sizes):
        parser.error("--reps and --sizes must be > 0")

    results = []
    with tempfile.TemporaryDirectory(prefix="damc-bench-") as directory:
        for n in args.sizes:
            print(f"# {n} cards, {args.store} store: prefilling ...", file=sys.stderr, flush=True)
            results.append(run_size(n, args, directory))
    print_table(results)
    if args.json:
        payload = {
            "machine": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
            },
            "budget": BUDGET,
            "results": results,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(payload, indent=2))
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
