"""Long, noisy agent trajectories in tau-bench shape, for retention tests at tens of thousands of tokens.

Each trajectory is a travel-and-shopping agent working through several trip legs: flight, hotel and
product searches that return long lists with many fields, web-search paragraphs full of
distractor values, sold-out options and tool errors that later calls must avoid, fares and room
rates that change when re-queried, and IDs from the first few steps (an old order, an existing
reservation, payment methods, addresses) used as arguments near the end.

Every later tool call takes exact values (IDs, dates, prices) that appeared earlier in tool
results or user turns, so the decision-fact judge has facts to check. Each value change is listed
in ``conflicts`` as ``{"from_step": t, "old": ..., "new": ...}``, where ``t`` is the index of the
message in which the new value first appears; every call after ``t`` uses the new value.

Output: ``[{"traj": [messages...], "conflicts": [...], "info": {...}}]`` with OpenAI-format
messages (system, user, assistant with ``tool_calls``, tool with ``tool_call_id``, ``name`` and
``content``). Deterministic for a given seed; standard library only.

Usage::

    python benchmarks/long_traces.py --out /tmp/long.json --n 6 --seed 1
    damc replay /tmp/long.json --budget 1500 --out /tmp/long_ctx.jsonl
    python ../shared/eval/retention.py /tmp/long.json --contexts /tmp/long_ctx.jsonl damc
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
from typing import Any

from common import FIRST, LAST, TrajectoryBuilder, generator_main

CHARS_PER_TOKEN = 3.4
"""Rough cl100k characters per token for this JSON-heavy text (measured: 3.2-3.6)."""

CITIES = {
    "JFK": "New York",
    "LAX": "Los Angeles",
    "SFO": "San Francisco",
    "SEA": "Seattle",
    "ORD": "Chicago",
    "MIA": "Miami",
    "BOS": "Boston",
    "DEN": "Denver",
    "ATL": "Atlanta",
    "AUS": "Austin",
    "LAS": "Las Vegas",
    "MSY": "New Orleans",
    "PDX": "Portland",
    "SAN": "San Diego",
    "DCA": "Washington",
    "PHX": "Phoenix",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "SLC": "Salt Lake City",
}
AIRLINES = [
    ("UA", "United"),
    ("DL", "Delta"),
    ("AA", "American"),
    ("AS", "Alaska"),
    ("B6", "JetBlue"),
    ("WN", "Southwest"),
    ("NK", "Spirit"),
    ("F9", "Frontier"),
]
AIRCRAFT = ["A320", "A321neo", "B737-800", "B737 MAX 8", "B757-200", "E175", "A220-300", "B787-9"]
CABINS = ["basic_economy", "economy", "premium_economy", "business"]
HOTEL_WORDS = [
    "Grand",
    "Harbor",
    "Park",
    "Plaza",
    "Riverside",
    "Summit",
    "Union",
    "Garden",
    "Central",
    "Majestic",
    "Lighthouse",
    "Maple",
    "Copper",
    "Ivy",
    "Crescent",
    "Beacon",
    "Station",
]
HOTEL_KINDS = ["Hotel", "Inn", "Suites", "Lodge", "House", "Residences", "Boutique Hotel"]
NEIGHBORHOODS = [
    "Downtown",
    "Old Town",
    "Waterfront",
    "Midtown",
    "Arts District",
    "University",
    "Airport",
    "Financial District",
    "Riverside",
    "North End",
    "Chinatown",
    "Uptown",
]
AMENITIES = [
    "free wifi",
    "pool",
    "gym",
    "spa",
    "breakfast",
    "parking",
    "airport shuttle",
    "pet friendly",
    "rooftop bar",
    "laundry",
    "ev charging",
    "kitchenette",
    "24h front desk",
    "business center",
]
PRODUCTS = [
    ("Carry-On Suitcase", {"color": ["black", "navy", "sage", "silver"], "size": ["20in", "22in"]}),
    ("Travel Backpack", {"color": ["black", "olive", "grey"], "capacity": ["30L", "40L", "45L"]}),
    ("Noise-Cancelling Headphones", {"color": ["black", "white", "blue"], "type": ["over-ear", "in-ear"]}),
    ("Packing Cubes Set", {"color": ["teal", "black", "coral"], "pieces": ["4", "6", "8"]}),
    ("Rain Jacket", {"size": ["S", "M", "L", "XL"], "color": ["red", "black", "yellow"]}),
    ("Power Bank", {"capacity": ["10000mAh", "20000mAh"], "color": ["black", "white"]}),
    ("Travel Adapter", {"region": ["universal", "EU", "UK"], "usb_ports": ["2", "4"]}),
    ("Hiking Boots", {"size": ["8", "9", "10", "11"], "material": ["leather", "synthetic"]}),
    ("Neck Pillow", {"material": ["memory foam", "inflatable"], "color": ["grey", "navy"]}),
]
STYLES = ["Modern", "Historic", "Quiet", "Lively", "Cozy"]
REMARKS = ["great breakfast", "small rooms", "friendly staff", "street noise at night"]
BRANDS = ["Northwind", "Trailhead", "Voyager", "Altura", "Kestrel", "Meridian", "Lumen", "Basecamp"]
SELLERS = ["TravelGear Co", "OutdoorHub", "GadgetWorld", "Marketplace Seller 4412", "ShopDirect"]
FILLER = [
    "Travelers often report that {city} is busiest in early summer, when fares on popular routes climb.",
    "According to a recent survey, {pct}% of passengers prefer morning departures from {code}.",
    "The {name} was renovated in {year} and now offers {n} rooms, several with skyline views.",
    "Fares between {a} and {b} ranged from ${p1} to ${p2} last month, depending on the cabin.",
    "Local guides recommend arriving at {code} at least {n} minutes before departure on weekdays.",
    "Reviewers praised the {name} for its location but mentioned noise from the {hood} nightlife.",
    "Average nightly rates in {hood} rose to ${p1} during the festival week, up from ${p2}.",
    "Some carriers now charge ${fee} for a first checked bag on domestic routes out of {code}.",
    "Weather in {city} in {month} is typically mild, with highs around {t} degrees.",
    "Flight {flight} has an on-time rate of {pct}% over the past 60 days, per public tracking data.",
    "Travel insurance sold at checkout usually covers trip cancellation up to ${p1} per traveler.",
]

SYSTEM_PROMPT = """# Travel & Shopping Agent Policy

You help one signed-in customer plan trips: search and book flights and hotels, buy travel gear,
and manage existing reservations and orders.

- Before any booking, purchase, return or change, list the details and get an explicit "yes".
- Use only information from the user or from tools. Prices change: always book at the price the
  latest fare or offer lookup returned, never at a price from an earlier search.
- Never book a flight, hotel or product that a tool reported as sold out, unavailable or out of stock.
- If a payment method is declined, ask for or use another method the user has on file.
- Make one tool call at a time. Dates are YYYY-MM-DD; prices are in USD.
"""


class _Trajectory(TrajectoryBuilder):
    """Builds one trajectory step by step, keeping track of the values later steps must reuse."""

    def __init__(self, rng: random.Random, target_tokens: int) -> None:
        super().__init__(rng, target_tokens, CHARS_PER_TOKEN)
        self.today = dt.date(2024, 6, 1) + dt.timedelta(days=rng.randint(0, 60))
        self.legs: list[dict[str, Any]] = []
        self.orders: list[str] = []

    # -- value factories (unique within the trajectory) ---------------------------------------------
    def code(self, prefix: str = "", n: int = 6) -> str:
        alphabet = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
        return self.unique(lambda: prefix + "".join(self.rng.choice(alphabet) for _ in range(n)))

    def digits(self, n: int, prefix: str = "") -> str:
        return self.unique(lambda: prefix + str(self.rng.randint(10 ** (n - 1), 10**n - 1)))

    def price(self, lo: float, hi: float) -> float:
        """A price with two decimals whose last digit is not 0, unique in the trajectory."""

        def draw() -> str:
            cents = self.rng.randint(int(lo * 100), int(hi * 100))
            if cents % 10 == 0:
                cents += self.rng.randint(1, 9)
            return f"{cents / 100:.2f}"

        return float(self.unique(draw))

    def changed_price(self, old: float) -> float:
        factor = self.rng.choice([self.rng.uniform(0.86, 0.97), self.rng.uniform(1.04, 1.22)])
        return self.price(old * factor, old * factor + 0.99)

    def date(self, after: dt.date, lo: int = 1, hi: int = 6) -> dt.date:
        return after + dt.timedelta(days=self.rng.randint(lo, hi))

    # -- noise ------------------------------------------------------------------------------------
    def web_search(self, query: str, a: str, b: str) -> None:
        rng = self.rng
        paragraphs = []
        for _ in range(rng.randint(4, 8)):
            sentences = [
                rng.choice(FILLER).format(
                    city=CITIES[rng.choice([a, b])],
                    code=rng.choice([a, b]),
                    a=CITIES[a],
                    b=CITIES[b],
                    pct=rng.randint(55, 93),
                    year=rng.randint(2012, 2023),
                    n=rng.randint(45, 420),
                    name=f"{rng.choice(HOTEL_WORDS)} {rng.choice(HOTEL_KINDS)}",
                    hood=rng.choice(NEIGHBORHOODS),
                    p1=rng.randint(90, 900),
                    p2=rng.randint(60, 700),
                    fee=rng.choice([30, 35, 40, 45]),
                    month=rng.choice(["June", "July", "August", "September"]),
                    t=rng.randint(64, 92),
                    flight=f"{rng.choice(AIRLINES)[0]}{rng.randint(100, 2999)}",
                )
                for _ in range(rng.randint(3, 6))
            ]
            title = f"{rng.choice(['Guide', 'Review', 'News', 'Forum', 'Deals'])}: {query.title()}"
            paragraphs.append(f"[{len(paragraphs) + 1}] {title}\n" + " ".join(sentences))
        self.tool("web_search", {"query": query}, "\n\n".join(paragraphs))

    # -- phases -----------------------------------------------------------------------------------
    def intro(self) -> None:
        rng = self.rng
        self.first, self.last = rng.choice(FIRST), rng.choice(LAST)
        self.user_id = f"{self.first.lower()}_{self.last.lower()}_{self.digits(4)}"
        self.email = f"{self.first.lower()}.{self.last.lower()}{rng.randint(10, 99)}@example.com"
        self.credit = f"credit_card_{self.digits(7)}"
        self.gift = f"gift_card_{self.digits(7)}"
        self.paypal = f"paypal_{self.digits(7)}"
        self.gift_balance = self.price(12, 60)
        self.addresses = [f"addr_{self.digits(6)}" for _ in range(2)]
        self.old_reservation = self.code()
        self.old_order = "#W" + self.digits(7)
        self.home = rng.choice(list(CITIES))
        self.loyalty = self.code("LY", 8)
        self.add({"role": "system", "content": SYSTEM_PROMPT + f"\nToday is {self.today.isoformat()}."})
        self.user(
            f"Hi! I'm {self.first} {self.last}, user id {self.user_id}. I'm planning a multi-city trip "
            f"starting from {CITIES[self.home]} and I'll need flights, hotels and some travel gear."
        )
        self.tool(
            "get_user_details",
            {"user_id": self.user_id},
            {
                "user_id": self.user_id,
                "name": {"first_name": self.first, "last_name": self.last},
                "email": self.email,
                "dob": f"19{rng.randint(60, 99)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
                "membership": rng.choice(["silver", "gold", "platinum"]),
                "loyalty_number": self.loyalty,
                "payment_methods": {
                    self.credit: {
                        "source": "credit_card",
                        "brand": "visa",
                        "last_four": f"{rng.randint(0, 9999):04d}",
                        "id": self.credit,
                    },
                    self.gift: {"source": "gift_card", "amount": self.gift_balance, "id": self.gift},
                    self.paypal: {"source": "paypal", "id": self.paypal},
                },
                "saved_addresses": [
                    {
                        "address_id": self.addresses[0],
                        "label": "home",
                        "address1": f"{rng.randint(10, 999)} Elm St",
                        "city": CITIES[self.home],
                        "zip": f"{rng.randint(10000, 99999)}",
                    },
                    {
                        "address_id": self.addresses[1],
                        "label": "work",
                        "address1": f"{rng.randint(10, 999)} Main Ave",
                        "city": CITIES[self.home],
                        "zip": f"{rng.randint(10000, 99999)}",
                    },
                ],
                "reservations": [self.old_reservation],
                "orders": [self.old_order],
                "preferences": {
                    "seat": rng.choice(["aisle", "window"]),
                    "meal": rng.choice(["none", "vegetarian"]),
                },
            },
        )
        self.say(
            "Thanks! I have your profile. Before we start the trip: is there anything about your "
            "existing reservation or last order I should look at?"
        )
        self.user("Yes, I think something in my last order was wrong, but let's first plan the trip.")
        items = []
        for _ in range(rng.randint(3, 5)):
            name, options = rng.choice(PRODUCTS)
            items.append(
                {
                    "name": name,
                    "product_id": self.digits(10),
                    "item_id": self.digits(10),
                    "price": self.price(15, 320),
                    "options": {k: rng.choice(v) for k, v in options.items()},
                }
            )
        self.old_items = items
        self.tool(
            "get_order_details",
            {"order_id": self.old_order},
            {
                "order_id": self.old_order,
                "user_id": self.user_id,
                "status": "delivered",
                "items": items,
                "address_id": self.addresses[0],
                "payment_history": [
                    {
                        "transaction_type": "payment",
                        "amount": round(sum(i["price"] for i in items), 2),
                        "payment_method_id": self.credit,
                    }
                ],
                "fulfillments": [
                    {"tracking_id": [self.digits(12)], "item_ids": [i["item_id"] for i in items]}
                ],
            },
        )
        self.say(f"I can see order {self.old_order} was delivered. We can come back to it later.")
        res_date = self.date(self.today, 20, 40)
        origin, destination = rng.sample(list(CITIES), 2)
        self.old_res = {
            "reservation_id": self.old_reservation,
            "origin": origin,
            "destination": destination,
            "date": res_date.isoformat(),
            "bags": rng.randint(0, 1),
        }
        self.tool(
            "get_reservation_details",
            {"reservation_id": self.old_reservation},
            {
                "reservation_id": self.old_reservation,
                "user_id": self.user_id,
                "origin": origin,
                "destination": destination,
                "flight_type": "one_way",
                "cabin": "economy",
                "flights": [
                    {
                        "flight_number": f"{rng.choice(AIRLINES)[0]}{rng.randint(100, 2999)}",
                        "date": res_date.isoformat(),
                        "price": self.price(120, 480),
                    }
                ],
                "passengers": [{"first_name": self.first, "last_name": self.last}],
                "total_baggages": self.old_res["bags"],
                "nonfree_baggages": 0,
                "insurance": "no",
                "status": "confirmed",
            },
        )
        self.say("Your existing reservation is confirmed. Where would you like to go first?")

    def leg(self, origin: str, destination: str, depart: dt.date) -> None:
        rng = self.rng
        cabin = rng.choice(CABINS[:3])
        passengers = 1 + (rng.random() < 0.3)
        self.user(
            f"Next I need to get from {CITIES[origin]} ({origin}) to {CITIES[destination]} ({destination}) "
            f"on {depart.isoformat()}, "
            f"{cabin.replace('_', ' ')}, {passengers} passenger{'s' if passengers > 1 else ''}. "
            f"I'd like to land before the evening if possible."
        )
        if rng.random() < 0.7:
            self.web_search(
                f"{CITIES[origin]} to {CITIES[destination]} flights {depart:%B}", origin, destination
            )
        flights = self.search_flights(origin, destination, depart, cabin)
        open_rows = [f for f in flights if f["seats_left"][cabin] > 0 and f["status"] != "sold_out"]
        rng.shuffle(open_rows)
        choice = open_rows[0]
        if rng.random() < 0.45 and len(open_rows) > 1:
            # the list said seats were left, but the hold fails: the option must be avoided later
            doomed, choice = open_rows[0], open_rows[1]
            self.tool(
                "hold_seat",
                {
                    "flight_number": doomed["flight_number"],
                    "date": depart.isoformat(),
                    "cabin": cabin,
                    "passengers": passengers,
                },
                f"Error: flight {doomed['flight_number']} on {depart.isoformat()} is sold out in "
                f"{cabin} (inventory changed since search).",
            )
            self.say(
                f"{doomed['flight_number']} just sold out. The next best option is "
                f"{choice['flight_number']} departing {choice['departure']}."
            )
        listed = choice["fares"][cabin]
        fare_id = self.code("FR")
        price = listed
        if rng.random() < 0.55:
            price = self.changed_price(listed)
        step = self.tool(
            "get_fare_details",
            {"flight_number": choice["flight_number"], "date": depart.isoformat(), "cabin": cabin},
            self.fare(choice, depart, cabin, fare_id, price),
        )
        if price != listed:
            self.conflict(step, listed, price, f"fare {choice['flight_number']} {cabin}")
        self.user("Sounds fine. Please go ahead." if rng.random() < 0.5 else "ok, yes book it")
        if rng.random() < 0.3:
            self.web_search(f"{CITIES[destination]} weather {depart:%B}", origin, destination)
            newer = self.changed_price(price)
            step = self.tool(
                "get_fare_details",
                {"flight_number": choice["flight_number"], "date": depart.isoformat(), "cabin": cabin},
                self.fare(choice, depart, cabin, fare_id, newer),
            )
            self.conflict(step, price, newer, f"fare {choice['flight_number']} {cabin} (re-query)")
            self.say(f"Note: the fare changed to {newer:.2f} per passenger since the last check.")
            self.user("Fine, still book it.")
            price = newer
        names = [{"first_name": self.first, "last_name": self.last}]
        if passengers > 1:
            names.append({"first_name": rng.choice(FIRST), "last_name": self.last})
        total = round(price * passengers, 2)
        payment = self.credit
        order = {
            "flight_number": choice["flight_number"],
            "date": depart.isoformat(),
            "fare_id": fare_id,
            "price": price,
            "passengers": names,
        }
        if total > self.gift_balance and rng.random() < 0.4:
            self.tool(
                "book_flight",
                {**order, "payment_method_id": self.gift},
                {
                    "error": f"payment declined: {self.gift} balance {self.gift_balance:.2f} is insufficient "
                    f"for {total:.2f}"
                },
            )
            self.say("Your gift card doesn't cover it; I'll use your credit card on file instead.")
            payment = self.credit if rng.random() < 0.6 else self.paypal
        booking = self.code("FB")
        self.tool(
            "book_flight",
            {**order, "payment_method_id": payment},
            {
                "booking_id": booking,
                "status": "confirmed",
                "flight_number": choice["flight_number"],
                "date": depart.isoformat(),
                "departure": choice["departure"],
                "arrival": choice["arrival"],
                "cabin": cabin,
                "passengers": names,
                "total_charged": total,
                "payment_method_id": payment,
                "record_locator": self.code(n=6),
            },
        )
        leg: dict[str, Any] = {
            "origin": origin,
            "destination": destination,
            "date": depart,
            "booking": booking,
            "flight": choice["flight_number"],
            "departure": choice["departure"],
            "payment": payment,
        }
        self.legs.append(leg)
        self.say(f"Booked: {booking}, {choice['flight_number']} on {depart.isoformat()}.")
        self.hotel(leg)
        if rng.random() < 0.65:
            self.shop(destination)
        if len(self.legs) >= 2 and rng.random() < 0.5:
            self.flight_status(self.legs[rng.randrange(len(self.legs) - 1)])

    def search_flights(
        self, origin: str, destination: str, depart: dt.date, cabin: str
    ) -> list[dict[str, Any]]:
        rng = self.rng
        rows = []
        for _ in range(rng.randint(16, 32)):
            code, airline = rng.choice(AIRLINES)
            dep_h, dep_m = rng.randint(5, 21), rng.choice([0, 5, 15, 20, 30, 40, 45, 55])
            minutes = rng.randint(75, 390)
            dep = dt.datetime.combine(depart, dt.time(dep_h, dep_m))
            arr = dep + dt.timedelta(minutes=minutes)
            stops = rng.choice([0, 0, 0, 1, 1, 2])
            seats = {c: rng.choice([0, rng.randint(1, 9), rng.randint(1, 30)]) for c in CABINS}
            base = rng.uniform(90, 420) * (1 + 0.35 * stops)
            fares = {
                c: self.price(base * m, base * m + 25)
                for c, m in zip(CABINS, (0.8, 1.0, 1.6, 3.4), strict=True)
            }
            sold_out = all(v == 0 for v in seats.values()) or rng.random() < 0.1
            rows.append(
                {
                    "flight_number": self.unique(lambda code=code: f"{code}{rng.randint(100, 2999)}"),
                    "airline": airline,
                    "origin": origin,
                    "destination": destination,
                    "departure": dep.strftime("%Y-%m-%dT%H:%M"),
                    "arrival": arr.strftime("%Y-%m-%dT%H:%M"),
                    "duration_minutes": minutes,
                    "stops": stops,
                    "layovers": [rng.choice(list(CITIES)) for _ in range(stops)],
                    "aircraft": rng.choice(AIRCRAFT),
                    "status": "sold_out" if sold_out else "scheduled",
                    "seats_left": {c: 0 for c in CABINS} if sold_out else seats,
                    "fares": fares,
                    "baggage": {
                        "carry_on": "included",
                        "first_checked": rng.choice(["$35", "$40", "included"]),
                    },
                    "on_time_rate": round(rng.uniform(0.62, 0.96), 2),
                    "wifi": rng.random() < 0.7,
                    "co2_kg": rng.randint(80, 420),
                }
            )
        if not any(r["status"] != "sold_out" and r["seats_left"][cabin] > 0 for r in rows):
            rows[0]["status"], rows[0]["seats_left"][cabin] = "scheduled", 4
        searched_at = f"{self.today.isoformat()}T10:{len(self.messages) % 60:02d}"
        self.tool(
            "search_flights",
            {"origin": origin, "destination": destination, "date": depart.isoformat(), "cabin": cabin},
            {"results": rows, "currency": "USD", "searched_at": searched_at},
        )
        return rows

    def fare(
        self, flight: dict[str, Any], depart: dt.date, cabin: str, fare_id: str, price: float
    ) -> dict[str, Any]:
        rng = self.rng
        return {
            "fare_id": fare_id,
            "flight_number": flight["flight_number"],
            "date": depart.isoformat(),
            "cabin": cabin,
            "price_per_passenger": price,
            "currency": "USD",
            "fare_rules": {
                "refundable": rng.random() < 0.3,
                "change_fee": rng.choice([0, 75, 99, 150]),
                "seat_selection": rng.choice(["free", "$25", "$39"]),
            },
            "taxes_included": True,
            "expires_in_minutes": rng.choice([15, 20, 30]),
        }

    def hotel(self, leg: dict[str, Any]) -> None:
        rng = self.rng
        city = CITIES[leg["destination"]]
        check_in = leg["date"]
        check_out = self.date(check_in, 2, 5)
        leg["check_out"] = check_out
        guests = rng.randint(1, 2)
        if rng.random() < 0.5:
            self.user(
                f"I also need a hotel in {city} from {check_in.isoformat()} to {check_out.isoformat()}, "
                f"walkable to {rng.choice(NEIGHBORHOODS)}."
            )
        else:
            self.user(
                f"And a hotel for {(check_out - check_in).days} nights there, please, something mid-range."
            )
        hotels = []
        for _ in range(rng.randint(14, 26)):
            rooms = rng.choice([0, rng.randint(1, 3), rng.randint(3, 25)])
            nightly = self.price(85, 540)
            hotels.append(
                {
                    "hotel_id": self.code("H", 5),
                    "name": f"{rng.choice(HOTEL_WORDS)} {rng.choice(HOTEL_WORDS)} {rng.choice(HOTEL_KINDS)}",
                    "stars": rng.randint(2, 5),
                    "neighborhood": rng.choice(NEIGHBORHOODS),
                    "distance_km": round(rng.uniform(0.2, 14), 1),
                    "guest_rating": round(rng.uniform(6.1, 9.7), 1),
                    "reviews": rng.randint(40, 6800),
                    "nightly_rate_from": nightly,
                    "rooms_left": rooms,
                    "availability": "sold_out" if rooms == 0 else "available",
                    "free_cancellation": rng.random() < 0.6,
                    "amenities": rng.sample(AMENITIES, rng.randint(3, 7)),
                    "snippet": f"{rng.choice(STYLES)} stay near {rng.choice(NEIGHBORHOODS)}; "
                    f"{rng.choice(REMARKS)}.",
                }
            )
        available = [h for h in hotels if h["rooms_left"] > 0]
        if not available:
            hotels[0]["rooms_left"], hotels[0]["availability"] = 5, "available"
            available = [hotels[0]]
        self.tool(
            "search_hotels",
            {
                "city": city,
                "check_in": check_in.isoformat(),
                "check_out": check_out.isoformat(),
                "guests": guests,
            },
            {"hotels": hotels, "total_results": len(hotels) + rng.randint(20, 200), "page": 1},
        )
        rng.shuffle(available)
        pick = available[0]

        def stay(hotel: dict[str, Any]) -> dict[str, Any]:
            return {
                "hotel_id": hotel["hotel_id"],
                "check_in": check_in.isoformat(),
                "check_out": check_out.isoformat(),
                "guests": guests,
            }

        if len(available) > 1 and rng.random() < 0.35:
            self.tool(
                "get_hotel_offers",
                stay(pick),
                {
                    "error": f"no availability at {pick['hotel_id']} for {check_in.isoformat()} - "
                    f"{check_out.isoformat()}",
                    "hotel_id": pick["hotel_id"],
                },
            )
            self.say(f"{pick['name']} has no rooms left for those dates after all; checking another option.")
            pick = available[1]
        nights = (check_out - check_in).days
        offers = []
        for _ in range(rng.randint(3, 6)):
            rate = self.price(pick["nightly_rate_from"], pick["nightly_rate_from"] * 1.8)
            with_taxes = rate * nights * 1.12
            offers.append(
                {
                    "offer_id": self.code("OF"),
                    "room_type": rng.choice(
                        ["Standard King", "Double Queen", "Deluxe King", "Junior Suite", "Studio"]
                    ),
                    "nightly_rate": rate,
                    "total_price": self.price(with_taxes, with_taxes + 0.99),
                    "taxes_included": True,
                    "refundable": rng.random() < 0.5,
                    "breakfast": rng.random() < 0.4,
                    "bed": rng.choice(["1 king", "2 queens", "1 queen"]),
                    "max_guests": rng.randint(2, 4),
                }
            )
        self.tool(
            "get_hotel_offers",
            stay(pick),
            {"hotel_id": pick["hotel_id"], "name": pick["name"], "offers": offers},
        )
        offer = rng.choice(offers)
        total = offer["total_price"]
        self.say(
            f"{pick['name']} ({pick['hotel_id']}) has a {offer['room_type']} ({offer['offer_id']}) for "
            f"{total:.2f} total. Shall I book it?"
        )
        self.user("yes please")
        if rng.random() < 0.4:
            new_total = self.changed_price(total)
            step = self.tool(
                "get_hotel_offers",
                {
                    "hotel_id": pick["hotel_id"],
                    "check_in": check_in.isoformat(),
                    "check_out": check_out.isoformat(),
                    "guests": guests,
                },
                {
                    "hotel_id": pick["hotel_id"],
                    "name": pick["name"],
                    "offers": [
                        {
                            **offer,
                            "total_price": new_total,
                            "nightly_rate": round(new_total / nights, 2),
                            "note": "rate updated",
                        }
                    ],
                },
            )
            self.conflict(step, total, new_total, f"hotel offer {offer['offer_id']} total")
            self.say(f"The rate was updated: {new_total:.2f} total now. Still OK?")
            self.user("ok")
            total = new_total
        booking = self.code("HB")
        self.tool(
            "book_hotel",
            {
                "hotel_id": pick["hotel_id"],
                "offer_id": offer["offer_id"],
                "check_in": check_in.isoformat(),
                "check_out": check_out.isoformat(),
                "guests": guests,
                "total_price": total,
                "payment_method_id": leg["payment"],
            },
            {
                "hotel_booking_id": booking,
                "status": "confirmed",
                "hotel_id": pick["hotel_id"],
                "confirmation_code": self.code(n=8),
                "total_charged": total,
                "cancellation_deadline": (check_in - dt.timedelta(days=2)).isoformat(),
            },
        )
        leg["hotel_booking"] = booking
        self.say(f"Hotel booked: {booking}.")

    def shop(self, destination: str) -> None:
        rng = self.rng
        name, options = rng.choice(PRODUCTS)
        self.user(
            f"For the {CITIES[destination]} part I need a {name.lower()}. Can you find a good one under $300?"
        )
        rows = []
        for _ in range(rng.randint(15, 28)):
            stock = rng.choice([0, rng.randint(1, 4), rng.randint(5, 140)])
            rows.append(
                {
                    "product_id": self.digits(10),
                    "title": f"{rng.choice(BRANDS)} {name} "
                    f"{rng.choice(['Pro', 'Lite', 'X', 'Plus', '2', 'Classic'])}",
                    "price": self.price(18, 340),
                    "list_price": self.price(40, 420),
                    "rating": round(rng.uniform(2.9, 4.9), 1),
                    "ratings_count": rng.randint(3, 21000),
                    "seller": rng.choice(SELLERS),
                    "stock": stock,
                    "availability": "out_of_stock" if stock == 0 else "in_stock",
                    "ships_in_days": rng.randint(1, 9),
                    "prime": rng.random() < 0.5,
                }
            )
        self.tool("search_products", {"query": name.lower(), "max_price": 300}, {"products": rows})
        in_stock = [r for r in rows if r["stock"] > 0] or rows[:1]
        pick = rng.choice(in_stock)
        if pick["stock"] == 0:
            pick["stock"], pick["availability"] = 3, "in_stock"
        variants = []
        for _ in range(rng.randint(3, 6)):
            variants.append(
                {
                    "item_id": self.digits(10),
                    "options": {k: rng.choice(v) for k, v in options.items()},
                    "price": self.price(pick["price"] * 0.9, pick["price"] * 1.15),
                    "available": rng.random() < 0.75,
                }
            )
        if not any(v["available"] for v in variants):
            variants[0]["available"] = True
        self.tool(
            "get_product_details",
            {"product_id": pick["product_id"]},
            {
                "product_id": pick["product_id"],
                "title": pick["title"],
                "variants": variants,
                "description": f"{pick['title']} by {pick['seller']}. "
                + " ".join(
                    rng.choice(
                        [
                            "Lightweight and durable.",
                            "Water resistant.",
                            "Two-year warranty.",
                            "Fits airline size limits.",
                            "Recycled materials.",
                        ]
                    )
                    for _ in range(4)
                ),
            },
        )
        item = rng.choice([v for v in variants if v["available"]])
        price = item["price"]
        self.user(f"The {'/'.join(item['options'].values())} one looks good, order it to my home address.")
        if rng.random() < 0.35:
            new_price = self.changed_price(price)
            step = self.tool(
                "get_product_details",
                {"product_id": pick["product_id"]},
                {
                    "product_id": pick["product_id"],
                    "title": pick["title"],
                    "variants": [{**item, "price": new_price, "price_updated": True}],
                },
            )
            self.conflict(step, price, new_price, f"item {item['item_id']} price")
            price = new_price
        cart = self.code("CART", 8)
        self.tool(
            "add_to_cart",
            {"item_id": item["item_id"], "quantity": 1, "unit_price": price},
            {
                "cart_id": cart,
                "items": [{"item_id": item["item_id"], "quantity": 1, "unit_price": price}],
                "subtotal": price,
            },
        )
        order = "#W" + self.digits(7)
        self.tool(
            "checkout",
            {"cart_id": cart, "payment_method_id": self.credit, "address_id": self.addresses[0]},
            {
                "order_id": order,
                "status": "pending",
                "total": price,
                "address_id": self.addresses[0],
                "estimated_delivery": self.date(self.today, 2, 7).isoformat(),
            },
        )
        self.orders.append(order)
        self.say(f"Ordered, order id {order}.")

    def flight_status(self, leg: dict[str, Any]) -> None:
        rng = self.rng
        self.user("Can you double-check that my first flight is still on schedule?")
        old = leg["departure"]
        seen = "\n".join(json.dumps(m) for m in self.messages)
        shifts = [d for d in range(-50, 130, 5) if d not in (0, 5, -5)]
        rng.shuffle(shifts)
        new = next(
            t
            for t in (
                (dt.datetime.fromisoformat(old) + dt.timedelta(minutes=d)).strftime("%Y-%m-%dT%H:%M")
                for d in shifts
            )
            if t not in seen
        )
        step = self.tool(
            "get_booking_status",
            {"booking_id": leg["booking"]},
            {
                "booking_id": leg["booking"],
                "flight_number": leg["flight"],
                "status": "retimed",
                "departure": new,
                "previous_departure": old,
                "gate": f"{rng.choice('ABCDE')}{rng.randint(1, 40)}",
            },
        )
        # both values appear in this result; the new one is the one to act on from here
        self.conflict(step, old, new, f"departure of {leg['flight']}")
        leg["departure"] = new
        self.say(
            f"{leg['flight']} was retimed to depart at {new}. Your booking {leg['booking']} is unaffected."
        )

    def finale(self) -> None:
        rng = self.rng
        item = rng.choice(self.old_items)
        self.user(
            f"Now about my last order: the {item['name'].lower()} arrived damaged. I'd like to return it "
            "and get the refund on my gift card."
        )
        self.tool(
            "return_items",
            {"order_id": self.old_order, "item_ids": [item["item_id"]], "payment_method_id": self.gift},
            {
                "order_id": self.old_order,
                "status": "return requested",
                "return_id": self.code("RT"),
                "refund_amount": item["price"],
                "refund_to": self.gift,
            },
        )
        self.user("Also add one checked bag to my existing reservation, paid with my credit card.")
        self.tool(
            "update_reservation_baggages",
            {
                "reservation_id": self.old_reservation,
                "total_baggages": self.old_res["bags"] + 1,
                "nonfree_baggages": 1,
                "payment_id": self.credit,
            },
            {
                "reservation_id": self.old_reservation,
                "total_baggages": self.old_res["bags"] + 1,
                "nonfree_baggages": 1,
                "status": "confirmed",
                "charged": 35,
            },
        )
        if len(self.legs) > 1 and rng.random() < 0.7:
            leg = self.legs[0]
            self.user("Actually, cancel the hotel for the first stop, I'll stay with friends.")
            self.tool(
                "cancel_hotel_booking",
                {"hotel_booking_id": leg["hotel_booking"]},
                {"hotel_booking_id": leg["hotel_booking"], "status": "cancelled", "refund": "full"},
            )
        self.user("Great, please email me the whole itinerary.")
        self.tool(
            "send_itinerary",
            {
                "email": self.email,
                "loyalty_number": self.loyalty,
                "flight_bookings": [leg["booking"] for leg in self.legs],
                "hotel_bookings": [leg["hotel_booking"] for leg in self.legs],
                "orders": self.orders,
            },
            {"sent": True, "to": self.email},
        )
        self.say("Done! The itinerary is in your inbox. Have a great trip.")

    def build(self) -> dict[str, Any]:
        self.intro()
        here, day = self.home, self.date(self.today, 7, 21)
        finale_chars = 3_000
        while self.chars + finale_chars < self.target_chars:
            there = self.rng.choice([c for c in CITIES if c != here])
            self.leg(here, there, day)
            here, day = there, self.legs[-1]["check_out"]
        self.finale()
        return {
            "traj": self.messages,
            "conflicts": self.conflicts,
            "info": {
                "generator": "benchmarks/long_traces.py",
                "legs": len(self.legs),
                "tool_calls": self.calls,
                "estimated_tokens": self.tokens,
            },
        }


def make_long_traces(n_traj: int = 6, seed: int = 0, target_tokens: int = 40_000) -> list[dict[str, Any]]:
    """``n_traj`` trajectories of about ``target_tokens`` tokens each (varied by +-25 % per trajectory)."""
    if n_traj <= 0 or target_tokens <= 0:
        raise ValueError(f"n_traj and target_tokens must be > 0, got {n_traj} and {target_tokens}")
    out = []
    for index in range(n_traj):
        rng = random.Random(seed * 1_000_003 + index)
        target = int(target_tokens * rng.uniform(0.75, 1.25))
        out.append(_Trajectory(rng, target).build())
    return out


def main(argv: list[str] | None = None) -> int:
    return generator_main(
        argv,
        doc=__doc__,
        make=lambda n, seed, tokens: make_long_traces(n_traj=n, seed=seed, target_tokens=tokens),
        n=6,
        target_tokens=40_000,
        spread="+-25%%",
        describe=lambda item: (
            f"{len(item['traj'])} messages, {item['info']['tool_calls']} tool calls, {item['info']['legs']} "
            f"legs, ~{item['info']['estimated_tokens']} tokens, {len(item['conflicts'])} conflicts"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
