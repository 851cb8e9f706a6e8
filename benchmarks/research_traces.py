"""Long web-research and coding agent trajectories, for retention tests on URLs and file paths.

Two kinds of agent alternate in a trace set, the most common LangChain and LlamaIndex agents:

- **Web research.** The user asks questions with constraints (a year, kinds of sources). The agent
  calls ``web_search(query)``, whose results come as numbered text (title, URL on its own line,
  snippet), as JSON (a list of ``{title, url, content, score}``) or as Markdown links, then
  ``fetch_page(url)`` of one result that is often not the first. Pages are long prose with numbers,
  dates, names, navigation and reference links; some calls follow a link inside a page, some go
  back to a result of a search several steps earlier (the second source, after the first
  disappointed), some URLs are ruled out by an error (404, paywall) and some redirect (the new URL
  is the one cited from then on: a conflict). Notes are saved to files (``save_note`` answers
  with the note's path, which a later ``append_to_note`` takes), and the last call,
  ``send_report(to, subject, urls)``, cites sources from every question, some from the first steps.
- **Coding.** ``list_directory(path)`` (``ls -la`` text, a recursive file list or JSON entries),
  ``read_file(path)`` of Python or TypeScript sources that import other modules of the repository,
  ``search_code(pattern)`` as grep output (``path:line: text``), ``run_tests(path)`` with failing
  test ids (``tests/core/test_parser.py::test_parse_header_unicode``) and tracebacks through the
  sources, a web search for an error message whose result pages are read, then
  ``edit_file(path, old_str, new_str)`` and ``run_tests(test_id)`` taking paths, source lines and
  test ids from earlier results; the first test run lists failures fixed many steps later, a file
  may turn out to have been moved (a conflict), and ``create_pull_request`` lists every edited
  path and fixed test.

Every listing, page and grep output holds many links and paths that no call uses. User turns
sometimes name a URL, a path or a test id themselves.

Output: ``[{"traj": [messages...], "conflicts": [...], "info": {...}}]`` with OpenAI-format
messages (system, user, assistant with ``tool_calls``, tool with ``tool_call_id``, ``name`` and
``content``); a conflict is ``{"from_step": t, "old": ..., "new": ..., "what": ...}`` where ``t`` is
the message in which the new value first appears. Deterministic for a given seed; standard
library only.

Usage::

    python benchmarks/research_traces.py --out /tmp/research.json --n 8 --seed 1
    damc replay /tmp/research.json --budget 1500 --out /tmp/research_ctx.jsonl
    python ../shared/eval/retention.py /tmp/research.json --contexts /tmp/research_ctx.jsonl damc
"""

from __future__ import annotations

import datetime as dt
import json
import random
import sys
from typing import Any

from common import FIRST, LAST, TrajectoryBuilder, generator_main

CHARS_PER_TOKEN = 3.9
"""Rough cl100k characters per token for this prose, code and URL text."""

# -- web research vocabulary ------------------------------------------------------------------------
TOPICS = [
    ("grid-scale battery storage", "round-trip efficiency", "%", (78, 94)),
    ("heat pumps in cold climates", "seasonal coefficient of performance", "", (2, 4)),
    ("sodium-ion batteries", "cell energy density", "Wh/kg", (105, 175)),
    ("offshore wind farms", "capacity factor", "%", (38, 58)),
    ("seawater desalination", "energy use", "kWh per cubic meter", (2, 5)),
    ("protected bike lanes", "reduction in cyclist injuries", "%", (18, 52)),
    ("microplastics in bottled water", "particle count", "particles per liter", (90, 340)),
    ("open-weight language models", "training corpus size", "trillion tokens", (2, 18)),
    ("green hydrogen electrolysers", "system efficiency", "%", (58, 74)),
    ("urban tree canopy", "summer surface cooling", "degrees C", (1, 6)),
    ("four-day work week pilots", "change in reported productivity", "%", (-3, 14)),
    ("lab-grown meat", "production cost", "USD per kg", (12, 90)),
    ("geothermal district heating", "levelized cost of heat", "EUR per MWh", (28, 75)),
    ("e-bike subsidies", "share of car trips replaced", "%", (12, 46)),
]
CONSTRAINTS = [
    "only figures published after {year}",
    "peer-reviewed or government sources, no vendor press releases",
    "data from {region}, not global averages",
    "at least two independent sources that agree within 10%",
    "sources that state their sample size",
]
REGIONS = ["Europe", "the Nordics", "North America", "Japan", "Australia", "Germany", "California"]
ORGS = [
    "the Northbridge Institute",
    "Helios Energy Lab",
    "Cascade University",
    "the Federal Statistics Office",
    "Meridian Analytics",
    "the Copperfield Foundation",
    "Lumen Research Group",
    "the Harbor Policy Center",
    "Altura Consulting",
    "the Open Data Collective",
    "Kestrel Engineering",
    "the National Standards Board",
]
JOURNALS = ["Applied Energy", "Joule", "Urban Studies", "Environmental Research Letters", "Nature Energy"]
NEWS = [
    "www.dailyledger.com",
    "techcurrent.io",
    "www.policywire.org",
    "thecivicpost.com",
    "www.metrobeat.news",
]
PAYWALLED = ["www.financialgazette.com", "www.theweeklyreview.co.uk", "members.industryinsider.com"]
GOV = ["www.energy-agency.gov", "stats.regional-office.eu", "data.cityworks.gov", "www.environment.gov.au"]
BLOGS = ["gridnotes.substack.com", "blog.openmetrics.dev", "www.cleanbuild.org", "notes.fieldresearch.net"]
FORUMS = ["forum.energytalk.net", "discuss.openscience.org", "community.homeowners.org"]
SECTIONS = ["science", "business", "technology", "climate", "policy", "cities", "analysis"]
SLUG_WORDS = [
    "new",
    "study",
    "finds",
    "costs",
    "fall",
    "record",
    "report",
    "data",
    "shows",
    "pilot",
    "results",
    "trial",
    "experts",
    "warn",
    "rise",
    "survey",
    "review",
    "estimate",
    "market",
    "update",
    "gap",
    "faster",
    "cheaper",
]
PROSE = [
    "{org} reported a {metric} of {num} {unit} in {month} {year}, up from {num2} {unit} a year earlier.",
    "According to {name}, a researcher at {org}, the figure could reach {num} {unit} by {year2}.",
    "The study, published on {date}, followed {n} sites across {region} over {k} years.",
    "Critics note that the {year} estimate relied on data from only {n} installations.",
    "{name} told reporters on {date} that costs had fallen by {pct}% since {year}.",
    "A {year} review in {journal} found median values between {num2} and {num} {unit}.",
    "The dataset, last updated {date}, lists {n} entries; {pct}% of them meet the stricter criterion.",
    "In {region}, {n} projects were commissioned in {year}, against {k} the year before.",
    "{org} cautioned that figures before {year} used a different method and are not comparable.",
    "Independent measurements by {name} put the value closer to {num2} {unit}.",
    "Funding of {money} million was announced on {date} for a second phase of the trial.",
    "Only {pct}% of respondents in the {year} survey said they would pay more for the upgrade.",
]
LINK_PROSE = [
    "The full methodology is in [the {org2} report]({link}).",
    "See {link} for the underlying data tables.",
    "An earlier version of this analysis ([{year}]({link})) used a smaller sample.",
    "{name} summarized the findings in a thread ({link}).",
    "The raw measurements are published as open data at {link}.",
]
NAV = ["Home", "News", "Analysis", "Data", "Newsletter", "Events", "About", "Contact", "Careers", "Podcasts"]
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]

# -- coding vocabulary ------------------------------------------------------------------------------
PACKAGES = ["ledgerkit", "quickconf", "tidyfeed", "parcelpy", "shelfdb", "routekit", "metricsd", "tessellate"]
SUBPACKAGES = ["core", "io", "cli", "utils", "storage", "api", "plugins"]
MODULES = [
    "config",
    "parser",
    "loader",
    "cache",
    "formatting",
    "errors",
    "models",
    "client",
    "schema",
    "timeutil",
    "registry",
    "render",
    "retry",
    "paths",
    "validators",
    "encoding",
    "session",
    "export",
]
VERBS = ["parse", "load", "normalize", "render", "resolve", "validate", "merge", "format", "encode", "split"]
NOUNS = ["header", "path", "record", "token", "timestamp", "entry", "payload", "url", "key", "row", "version"]
CASES = [
    "empty_input",
    "unicode",
    "trailing_slash",
    "roundtrip",
    "none_value",
    "large_values",
    "defaults",
    "invalid_raises",
    "nested",
    "windows_paths",
    "whitespace",
    "duplicate_keys",
]
STDLIB = ["json", "re", "os", "logging", "itertools", "functools", "hashlib", "datetime as dt"]
ERRORS = [
    ("IndexError", "list index out of range"),
    ("KeyError", "'{noun}'"),
    ("AssertionError", "assert '{noun}-1' == '{noun}_1'"),
    ("TypeError", "'NoneType' object is not subscriptable"),
    ("ValueError", "invalid {noun}: ''"),
    ("AttributeError", "'dict' object has no attribute 'strip'"),
]
ERRORS_TS = [
    ("TypeError", "Cannot read properties of undefined (reading 'split')"),
    ("AssertionError", "expected '{noun}-1' to be '{noun}_1' // Object.is equality"),
    ("RangeError", "Invalid array length"),
    ("TypeError", "{noun}.trim is not a function"),
]
CHANGES = [
    "bumping the minimum Python to 3.11",
    "the refactor of the {sub} package",
    "merging the Windows paths PR",
    "upgrading to pydantic 2",
    "switching the CI runners to ubuntu-24.04",
]
DOC_SITES = ["docs.python.org/3/library", "docs.pytest.org/en/stable/how-to", "peps.python.org"]

ARROW, CROSS = "\u276f", "\u00d7"
"""The marks vitest prints before a failing file and a failing test."""

RESEARCH_SYSTEM = """# Research Assistant

You answer research questions from the web. Search, read the pages, and cite only pages you
fetched and read. Rule out pages that fail to load or are paywalled; respect the user's
constraints on dates and kinds of sources. Save notes with their sources when asked, and cite
sources by their exact URL (after any redirect). Make one tool call at a time.
"""

CODING_SYSTEM = """# Coding Agent

You work in a checked-out repository. Explore with list_directory, read_file and search_code,
run the tests, make the smallest edit that fixes a failure, and run the failing test again.
edit_file replaces old_str, which must appear exactly once in the file, with new_str. Use
repository-relative paths. Make one tool call at a time.
"""


class _Trajectory(TrajectoryBuilder):
    """Builds one trajectory step by step, keeping the values later steps must reuse."""

    def __init__(self, rng: random.Random, target_tokens: int) -> None:
        super().__init__(rng, target_tokens, CHARS_PER_TOKEN)
        self.today = dt.date(2024, 6, 1) + dt.timedelta(days=rng.randint(0, 120))
        self.first, self.last = rng.choice(FIRST), rng.choice(LAST)
        self.email = f"{self.first.lower()}.{self.last.lower()}@{rng.choice(['example.com', 'example.org'])}"

    # -- values -----------------------------------------------------------------------------------
    def day(self, lo: int = -900, hi: int = -5) -> dt.date:
        return self.today + dt.timedelta(days=self.rng.randint(lo, hi))

    def slug(self, words: list[str], extra: int = 3) -> str:
        rng = self.rng
        picked = words + rng.sample(SLUG_WORDS, extra)
        rng.shuffle(picked)
        return "-".join(w.lower() for w in picked)

    def url(self, topic: str, kind: str | None = None) -> str:
        """A unique URL of a page about ``topic``, shaped as its kind of site shapes them."""
        rng = self.rng
        words = [w for w in topic.replace("-", " ").split() if len(w) > 2][:3]
        kind = kind or rng.choice(["news", "news", "gov", "blog", "paper", "wiki", "forum", "paywall"])

        def make() -> str:
            when = self.day()
            if kind == "news":
                site = rng.choice(NEWS)
                if rng.random() < 0.5:
                    link = f"https://{site}/{rng.choice(SECTIONS)}/{when:%Y/%m/%d}/{self.slug(words)}/"
                else:
                    link = f"https://{site}/{rng.choice(SECTIONS)}/{self.slug(words)}-{when:%Y-%m-%d}"
                if rng.random() < 0.25:
                    link += f"?utm_source={rng.choice(['newsletter', 'rss', 'twitter'])}&utm_medium=referral"
                return link
            if kind == "paywall":
                number = rng.randint(10**5, 10**6 - 1)
                return (
                    f"https://{rng.choice(PAYWALLED)}/{rng.choice(SECTIONS)}/{self.slug(words, 2)}-{number}"
                )
            if kind == "gov":
                site = rng.choice(GOV)
                if rng.random() < 0.5:
                    return f"https://{site}/sites/default/files/{when:%Y-%m}/{self.slug(words, 1)}-report.pdf"
                number = rng.randint(1000, 99999)
                return f"https://{site}/publications/{when:%Y}/{self.slug(words, 1)}?id={number}"
            if kind == "blog":
                site = rng.choice(BLOGS)
                if rng.random() < 0.3:
                    handle = f"{rng.choice(FIRST).lower()}{rng.randint(1, 99)}"
                    return f"https://medium.com/@{handle}/{self.slug(words)}-{rng.getrandbits(48):012x}"
                return f"https://{site}/p/{self.slug(words, 2)}"
            if kind == "paper":
                if rng.random() < 0.5:
                    return f"https://arxiv.org/abs/{when:%y%m}.{rng.randint(1000, 29999):05d}"
                journal = rng.choice(["j.apenergy", "j.joule", "erl", "nenergy"])
                number = rng.randint(10**5, 10**6 - 1)
                return f"https://doi.org/10.{rng.randint(1000, 9999)}/{journal}.{when:%Y}.{number}"
            if kind == "wiki":
                title = "_".join(w.capitalize() for w in words) + rng.choice(
                    ["", "_(technology)", "_in_" + rng.choice(REGIONS).replace(" ", "_")]
                )
                section = rng.choice(["", "#History", "#Economics", "#Efficiency", "#Criticism"])
                return f"https://en.wikipedia.org/wiki/{title}{section}"
            return f"https://{rng.choice(FORUMS)}/t/{self.slug(words, 2)}/{rng.randint(1000, 99999)}"

        return self.unique(make)

    # -- web ----------------------------------------------------------------------------------------
    def sentence(self, topic: tuple[str, str, str, tuple[int, int]], links: list[str] | None = None) -> str:
        rng = self.rng
        subject, metric, unit, (lo, hi) = topic

        def num() -> str:
            value = rng.uniform(lo, hi)
            return f"{value:.1f}" if hi - lo < 20 else str(round(value))

        year = rng.randint(2016, self.today.year)
        low, high = sorted((num(), num()), key=float)
        fields = {
            "org": rng.choice(ORGS),
            "org2": rng.choice(ORGS).removeprefix("the "),
            "metric": metric,
            "unit": unit or "",
            "num": high,
            "num2": low,
            "month": rng.choice(MONTHS),
            "year": year,
            "year2": rng.randint(self.today.year + 2, self.today.year + 12),
            "name": f"{rng.choice(FIRST)} {rng.choice(LAST)}",
            "date": self.day(-1500, -3).isoformat(),
            "n": rng.randint(12, 4800),
            "k": rng.randint(2, 11),
            "pct": rng.randint(3, 71),
            "region": rng.choice(REGIONS),
            "journal": rng.choice(JOURNALS),
            "money": rng.randint(2, 480),
        }
        if links is not None:
            fields["link"] = links.pop(0) if links else self.url(subject)
            return rng.choice(LINK_PROSE).format(**fields)
        text = rng.choice(PROSE).format(**fields).replace("  ", " ").replace(" ,", ",").replace(" .", ".")
        return text[0].upper() + text[1:]

    def search(
        self, topic: tuple[str, str, str, tuple[int, int]], query: str, n: int = 0
    ) -> list[dict[str, Any]]:
        """A ``web_search`` call; its results (title, url, snippet) in the order listed."""
        rng = self.rng
        subject = topic[0]
        results = []
        for _ in range(n or rng.randint(8, 10)):
            link = self.url(subject)
            title = f"{subject.capitalize()}: {' '.join(rng.sample(SLUG_WORDS, 4))}"
            if "wikipedia" in link:
                title = link.rsplit("/", 1)[1].split("#")[0].replace("_", " ") + " - Wikipedia"
            results.append(
                {"title": title, "url": link, "snippet": " ".join(self.sentence(topic) for _ in range(2))}
            )
        style = rng.choice(["numbered", "json", "markdown"])
        if style == "numbered":
            text = "\n\n".join(
                f"[{i + 1}] {r['title']}\n{r['url']}\n{r['snippet']}" for i, r in enumerate(results)
            )
            result: object = text
        elif style == "json":
            score = rng.uniform(0.86, 0.99)
            rows = []
            for r in results:
                rows.append(
                    {"title": r["title"], "url": r["url"], "content": r["snippet"], "score": round(score, 5)}
                )
                score *= rng.uniform(0.9, 0.995)
            result = rows
        else:
            result = f'Search results for "{query}":\n\n' + "\n".join(
                f"{i + 1}. [{r['title']}]({r['url']}) - {r['snippet']}" for i, r in enumerate(results)
            )
        self.tool("web_search", {"query": query}, result)
        return results

    def page(self, topic: tuple[str, str, str, tuple[int, int]], link: str, follow: int = 2) -> list[str]:
        """A ``fetch_page`` call returning a long page; returns links inside it a call may follow."""
        rng = self.rng
        subject = topic[0]
        follows = [self.url(subject, rng.choice(["paper", "gov", "gov", "news"])) for _ in range(follow)]
        inline = list(follows) + [self.url(subject) for _ in range(rng.randint(2, 5))]
        rng.shuffle(inline)
        site = link.split("/")[2]
        nav = " | ".join(f"[{item}](https://{site}/{item.lower()})" for item in rng.sample(NAV, 6))
        if site in ("doi.org", "arxiv.org"):
            pdf = link.replace("/abs/", "/pdf/")
            nav = f"[Download PDF]({pdf}) | Cite as: {link} | [Metrics]({link}/metrics)"
        author = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        published = self.day(-1400, -10)
        parts = [
            nav,
            f"# {subject.capitalize()}: {' '.join(rng.sample(SLUG_WORDS, 5))}",
            f"By {author} | Published {published:%B %d, %Y}"
            + (f" | Updated {self.day(-9, -1):%B %d, %Y}" if rng.random() < 0.3 else ""),
        ]
        for _ in range(rng.randint(6, 12)):
            sentences = [self.sentence(topic) for _ in range(rng.randint(3, 6))]
            if inline and rng.random() < 0.6:
                sentences.insert(rng.randrange(len(sentences) + 1), self.sentence(topic, inline))
            parts.append(" ".join(sentences))
        while inline:
            parts.append(self.sentence(topic, inline))
        if rng.random() < 0.6:
            refs = [self.url(subject, rng.choice(["paper", "gov", "blog"])) for _ in range(rng.randint(3, 7))]
            parts.append("## References\n" + "\n".join(f"{i + 1}. {r}" for i, r in enumerate(refs)))
        related = [self.url(subject) for _ in range(rng.randint(3, 6))]
        parts.append(
            "## Related\n"
            + "\n".join(f"- [{self.slug([], 4).replace('-', ' ').capitalize()}]({r})" for r in related)
        )
        parts.append(
            f"(c) {published.year} {site}. [Privacy](https://{site}/privacy) | "
            f"[Terms](https://{site}/terms) | "
            f"Contact: editors@{site.removeprefix('www.')}"
        )
        text = "\n\n".join(parts)
        if rng.random() < 0.3:
            text = f"Title: {parts[1][2:]}\nURL Source: {link}\n\nMarkdown Content:\n{text}"
        self.tool("fetch_page", {"url": link}, text)
        self.last_follows = follows
        return follows

    def fetch_fails(self, link: str) -> None:
        rng = self.rng
        if any(site in link for site in PAYWALLED) or rng.random() < 0.5:
            text = (
                "Subscribe to continue reading. This article is available to subscribers only. "
                f"Already a subscriber? Sign in at https://{link.split('/')[2]}/login"
                f"?next=/{link.split('/', 3)[3][:40]} "
                "- Plans from $4.99/month."
            )
        else:
            text = f"Error: HTTP 404 Not Found for {link}"
        self.tool("fetch_page", {"url": link}, text)

    def open_result(
        self, topic: tuple[str, str, str, tuple[int, int]], results: list[dict[str, Any]], picks: list[int]
    ) -> str:
        """Fetches the result ``picks`` names first; one paywalled or gone is ruled out, the next tried."""
        rng = self.rng
        while True:
            link = results[picks.pop(0)]["url"]
            paywalled = any(site in link for site in PAYWALLED)
            if picks and (paywalled or rng.random() < 0.2):
                self.fetch_fails(link)
                if rng.random() < 0.6:
                    self.say("That page is not readable (paywall or gone); trying another result.")
                continue
            self.page(topic, link)
            return link

    def research_question(self, index: int) -> None:
        rng = self.rng
        topic = self.topics[index]
        subject, metric, _unit, _ = topic
        constraint = rng.choice(CONSTRAINTS).format(year=rng.randint(2019, 2022), region=rng.choice(REGIONS))
        ask = f"What is the typical {metric} of {subject}? I need {constraint}."
        if index == 0 and rng.random() < 0.6:
            ask += f" When we're done with all my questions, send the report to {self.email}."
            self.email_told = True
        colleague = None
        if rng.random() < 0.35:
            colleague = self.url(subject, rng.choice(["blog", "news", "gov"]))
            ask += f" A colleague pointed me to {colleague}, include it if it's useful."
        self.user(ask)
        sources: list[str] = []
        first = self.search(topic, f"{subject} {metric} {rng.choice(['2024', 'data', 'study', 'report'])}")
        picks = rng.sample(range(min(8, len(first))), min(8, len(first)))
        if picks[0] == 0 and rng.random() < 0.6:
            picks.append(picks.pop(0))
        pick = self.open_result(topic, first, picks[:-2])
        picks = [i for i in picks if first[i]["url"] != pick]
        follows = self.last_follows
        sources.append(pick)
        if rng.random() < 0.6:
            target = rng.choice(follows)
            self.say(
                f"The article cites a primary source; reading it: {target}"
                if rng.random() < 0.3
                else "Following the article's link to the primary source."
            )
            more = self.page(topic, target, follow=1)
            sources.append(target)
            if rng.random() < 0.3:
                self.page(topic, more[0], follow=0)
        if rng.random() < 0.5:
            self.user(
                rng.choice(
                    [
                        "That first article looks old. Anything more recent?",
                        "Is there anything from a government or academic source?",
                        "ok, keep going",
                    ]
                )
            )
        second = self.search(
            topic, f"{metric} {subject} {rng.choice(['review', 'measured', 'survey', 'site:gov'])}"
        )
        link = second[rng.randrange(min(8, len(second)))]["url"]
        if rng.random() < 0.35 and not any(site in link for site in PAYWALLED):
            moved = self.url(subject, rng.choice(["news", "blog", "gov"]))
            self.tool_redirect(topic, link, moved)
            link = moved
        else:
            link = self.open_result(topic, second, rng.sample(range(min(8, len(second))), 4))
        sources.append(link)
        self.say(
            "That one is a vendor summary without a sample size, so it does not meet the constraint. "
            "Going back to the earlier search."
        )
        if rng.random() < 0.5:
            self.search(topic, f"{subject} {rng.choice(REGIONS)} {metric}")
            if rng.random() < 0.5:
                self.say("Nothing new there.")
        back = self.open_result(topic, first, [i for i in picks if first[i]["url"] not in sources])
        sources.append(back)
        if colleague:
            self.page(topic, colleague, follow=1)
            sources.append(colleague)
        cited = rng.sample(sources, min(len(sources), rng.randint(2, 4)))
        self.say(
            f"The sources put the {metric} of {subject} in a consistent range; "
            "details are in the pages I read."
        )
        self.cited.append(cited)
        if rng.random() < 0.75:
            title = f"{subject.capitalize()}: {metric}"
            name = f"notes/{self.today:%Y-%m-%d}-{self.slug(subject.split()[:3], 0)}.md"
            self.tool(
                "save_note",
                {"title": title, "sources": cited},
                f"Saved note '{title}' to {name} ({len(cited)} sources).",
            )
            self.notes.append((name, subject))

    def tool_redirect(self, topic: tuple[str, str, str, tuple[int, int]], old: str, new: str) -> None:
        """A fetch that redirects: the page's URL from here on is ``new`` (a conflict)."""
        rng = self.rng
        before = len(self.messages)
        self.page(topic, old, follow=1)
        content = self.messages[-1]["content"]
        self.messages[-1]["content"] = f"Redirected (301 Moved Permanently) to {new}\n\n{content}"
        self.chars += len(new) + 40
        self.conflict(before + 1, old, new, "page moved")
        if rng.random() < 0.5:
            self.say(f"Note: that page now lives at {new}.")

    def research(self) -> None:
        rng = self.rng
        self.email_told = False
        self.cited: list[list[str]] = []
        self.notes: list[tuple[str, str]] = []
        self.topics = rng.sample(TOPICS, len(TOPICS))
        self.add({"role": "system", "content": RESEARCH_SYSTEM + f"\nToday is {self.today.isoformat()}."})
        index = 0
        while self.chars + 6_000 < self.target_chars and index < len(self.topics) - 1:
            self.research_question(index)
            index += 1
            if self.notes and rng.random() < 0.35:
                name, subject = rng.choice(self.notes)
                extra = self.url(subject, "paper")
                self.user(f"Please also add {extra} to the {subject} note, I found it in a newsletter.")
                self.tool(
                    "append_to_note", {"path": name, "sources": [extra]}, f"Appended 1 source to {name}."
                )
        urls = [u for group in self.cited for u in group]
        picked = [urls[0], *rng.sample(urls[1:], min(len(urls) - 1, rng.randint(3, 6)))]
        if self.email_told:
            self.user(
                "That's all my questions. Please send the report now, citing the best sources from each."
            )
        else:
            self.user(
                f"That's all. Send the report to {self.email}, citing the best sources from each question."
            )
        self.tool(
            "send_report",
            {"to": self.email, "subject": "Research summary", "urls": picked},
            {
                "status": "sent",
                "to": self.email,
                "attachments": 0,
                "message_id": f"<{rng.getrandbits(64):x}@mail.example.com>",
            },
        )
        self.say("Sent. Let me know if you need anything else.")

    # -- coding -------------------------------------------------------------------------------------
    def repo(self) -> None:
        rng = self.rng
        self.lang = "py" if rng.random() < 0.7 else "ts"
        self.pkg = rng.choice(PACKAGES)
        subs = rng.sample(SUBPACKAGES, rng.randint(3, 5))
        self.modules: list[dict[str, Any]] = []
        for sub in subs:
            for mod in rng.sample(MODULES, rng.randint(3, 6)):
                funcs = []
                for _ in range(rng.randint(2, 5)):
                    funcs.append(self.unique(lambda: f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"))
                if self.lang == "py":
                    path = f"src/{self.pkg}/{sub}/{mod}.py"
                    test = f"tests/{sub}/test_{mod}.py"
                else:
                    path = f"src/{sub}/{mod}.ts"
                    test = f"tests/{sub}/{mod}.test.ts"
                    funcs = [self.camel(f) for f in funcs]
                self.modules.append(
                    {"sub": sub, "mod": mod, "path": path, "test": test, "funcs": funcs, "bug": None}
                )
        for module in self.modules:
            module["imports"] = [m for m in rng.sample(self.modules, 3) if m is not module][:2]
        if self.lang == "py":
            self.others = [
                "README.md",
                "pyproject.toml",
                "CHANGELOG.md",
                ".github/workflows/ci.yml",
                "docs/index.md",
                "docs/usage.md",
                "scripts/release.py",
                "tox.ini",
                ".pre-commit-config.yaml",
            ]
            self.others += [f"src/{self.pkg}/__init__.py"] + [f"src/{self.pkg}/{s}/__init__.py" for s in subs]
        else:
            self.others = [
                "README.md",
                "package.json",
                "tsconfig.json",
                "vitest.config.ts",
                ".eslintrc.cjs",
                ".github/workflows/ci.yml",
                "docs/usage.md",
                "src/index.ts",
            ]

    @staticmethod
    def camel(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(w.capitalize() for w in rest)

    def arg(self, func: str) -> str:
        noun = (
            func.split("_")[-1]
            if "_" in func
            else func.lstrip("abcdefghijklmnopqrstuvwxyz").lower() or "value"
        )
        return f"raw_{noun}" if self.lang == "py" else f"raw{noun.capitalize()}"

    def bug(self, module: dict[str, Any]) -> dict[str, Any]:
        """Plants a unique faulty line in one function of ``module``: the line a fix replaces."""
        rng = self.rng
        func = rng.choice(module["funcs"])
        a = self.arg(func)
        sep = rng.choice(["/", ":", ",", ";", "="])
        n = rng.randint(1, 3)
        if self.lang == "py":
            pairs = [
                (f'parts = {a}.split("{sep}")[{n}:]', f'parts = {a}.split("{sep}", maxsplit={n})[{n}:]'),
                (f"if len({a}) > {n * 32}:", f"if len({a}) >= {n * 32}:"),
                (f'key = {a}.lower().replace("-", "_{n}")', f'key = {a}.casefold().replace("-", "_")'),
                (f"return {a}.strip()[{n}:]", f"return {a}.strip()[{n - 1}:]"),
                (
                    f'value = options.get("{a}_limit", {n * 10})',
                    f'value = options.get("{a}_limit") or {n * 10}',
                ),
            ]
        else:
            pairs = [
                (
                    f'const parts = {a}.split("{sep}").slice({n});',
                    f'const parts = {a}.split("{sep}", {n + 1}).slice({n});',
                ),
                (f"if ({a}.length > {n * 32}) {{", f"if ({a}.length >= {n * 32}) {{"),
                (f"return {a}.trim().slice({n});", f"return {a}.trim().slice({n - 1});"),
                (
                    f"const limit = options.{a}Limit || {n * 10};",
                    f"const limit = options.{a}Limit ?? {n * 10};",
                ),
            ]
        old, new = rng.choice(pairs)
        self.used.add(old)
        module["bug"] = {"func": func, "old": old, "new": new}
        return module["bug"]

    def source(self, module: dict[str, Any]) -> tuple[str, dict[str, int]]:
        """The file's text and the line of each function (and of its bug, under ``"bug"``)."""
        rng = random.Random(module["path"])  # the same file reads the same every time
        lines: list[str] = []
        where: dict[str, int] = {}
        bug = module["bug"]
        if self.lang == "py":
            lines += [
                f'"""{module["mod"].capitalize()} helpers for {self.pkg}.{module["sub"]}."""',
                "",
                "from __future__ import annotations",
                "",
            ]
            stdlib = sorted(["re", *rng.sample([m for m in STDLIB if m != "re"], 2)])
            lines += [f"import {m}" for m in stdlib] + ["from typing import Any", ""]
            for other in module["imports"]:
                lines.append(f"from {self.pkg}.{other['sub']}.{other['mod']} import {other['funcs'][0]}")
            lines += [
                "",
                "log = logging.getLogger(__name__)"
                if "logging" in stdlib
                else f"DEFAULT_LIMIT = {rng.randint(8, 512)}",
            ]
            for func in module["funcs"]:
                a = self.arg(func)
                helper = module["imports"][0]["funcs"][0] if module["imports"] else "str"
                lines += ["", ""]
                where[func] = len(lines) + 1
                lines += [
                    f"def {func}({a}: str | None, *, strict: bool = False, **options: Any) -> str:",
                    f'    """{func.replace("_", " ").capitalize()} as {module["sub"]} expects it."""',
                    f"    if not {a}:",
                    '        return ""' if rng.random() < 0.5 else f'        raise ValueError("empty {a}")',
                ]
                if bug and bug["func"] == func:
                    where["bug"] = len(lines) + 1
                    lines.append("    " + bug["old"])
                lines += [
                    f"    value = {helper}({a}) if strict else {a}",
                    '    for part in re.split(r"[,;]\\s*", value):'
                    if rng.random() < 0.5
                    else "    for part in value.splitlines():",
                    '        if part.startswith("#"):',
                    "            continue",
                    "        value = value.replace(part, part.strip())",
                    "    return value",
                ]
            if rng.random() < 0.5:
                cls = module["mod"].capitalize() + rng.choice(["Cache", "Registry", "Store", "Client"])
                lines += [
                    "",
                    "",
                    f"class {cls}:",
                    f'    """Keeps {module["mod"]} entries by key."""',
                    "",
                    "    def __init__(self, limit: int = 128) -> None:",
                    "        self.limit = limit",
                    "        self._items: dict[str, Any] = {}",
                    "",
                    "    def get(self, key: str) -> Any:",
                    f"        return self._items.get({module['funcs'][0]}(key))",
                ]
        else:
            for other in module["imports"]:
                rel = (
                    f"../{other['sub']}/{other['mod']}"
                    if other["sub"] != module["sub"]
                    else f"./{other['mod']}"
                )
                lines.append(f'import {{ {other["funcs"][0]} }} from "{rel}";')
            lines += [
                "",
                f"export interface {module['mod'].capitalize()}Options {{",
                "  strict?: boolean;",
                "  limit?: number;",
                "}",
                "",
            ]
            for func in module["funcs"]:
                a = self.arg(func)
                helper = module["imports"][0]["funcs"][0] if module["imports"] else "String"
                lines += [""]
                where[func] = len(lines) + 1
                lines += [
                    f"export function {func}({a}: string | undefined, "
                    f"options: {module['mod'].capitalize()}Options = {{}}): string {{",
                    f"  if (!{a}) {{",
                    '    return "";',
                    "  }",
                ]
                if bug and bug["func"] == func:
                    where["bug"] = len(lines) + 1
                    lines.append("  " + bug["old"])
                    if bug["old"].endswith("{"):
                        lines += ["    return " + a + ".slice(0, 32);", "  }"]
                lines += [
                    f"  const value = options.strict ? {helper}({a}) : {a};",
                    "  return value",
                    "    .split(/[,;]\\s*/)",
                    '    .filter((part) => !part.startsWith("#"))',
                    '    .join(",");',
                    "}",
                ]
        return "\n".join(lines) + "\n", where

    def listing(self, path: str) -> None:
        rng = self.rng
        under = [m["path"] for m in self.modules] + [m["test"] for m in self.modules] + self.others
        under = sorted(p for p in under if path in (".", "") or p.startswith(path.rstrip("/") + "/"))
        style = rng.choice(["ls", "recursive", "json"])
        if style == "ls":
            prefix = "" if path in (".", "") else path.rstrip("/") + "/"
            names = sorted(
                {p[len(prefix) :].split("/")[0] + ("/" if "/" in p[len(prefix) :] else "") for p in under}
            )
            rows = [
                "total " + str(rng.randint(40, 400)),
                "drwxr-xr-x  9 dev dev 4096 Jun  3 10:12 .",
                "drwxr-xr-x 31 dev dev 4096 Jun  1 08:40 ..",
            ]
            for name in names:
                is_dir = name.endswith("/")
                rows.append(
                    f"{'drwxr-xr-x' if is_dir else '-rw-r--r--'} {rng.randint(1, 9):2d} dev dev "
                    f"{rng.randint(200, 24000):6d} {rng.choice(MONTHS)[:3]} {rng.randint(1, 28):2d} "
                    f"{rng.randint(8, 19):02d}:{rng.randint(0, 59):02d} {name.rstrip('/')}"
                )
            result: object = "\n".join(rows)
        elif style == "recursive":
            result = "\n".join(under) + f"\n\n{len(under)} files"
        else:
            result = [{"path": p, "type": "file", "size": rng.randint(120, 24000)} for p in under]
        self.tool("list_directory", {"path": path}, result)

    def read(self, path: str) -> None:
        module = next((m for m in self.modules if m["path"] == path), None)
        if module is None:
            test = next((m for m in self.modules if m["test"] == path), None)
            text = self.test_source(test) if test else self.other_file(path)
        else:
            text = self.source(module)[0]
        if self.rng.random() < 0.3:
            text = "\n".join(f"{i + 1:6d}\t{line}" for i, line in enumerate(text.splitlines()))
        self.tool("read_file", {"path": path}, text)

    def test_source(self, module: dict[str, Any]) -> str:
        lines = []
        if self.lang == "py":
            lines += [
                "import pytest",
                "",
                f"from {self.pkg}.{module['sub']}.{module['mod']} import {', '.join(module['funcs'])}",
                "",
            ]
            for test in module["tests"]:
                func = test["func"]
                lines += [
                    "",
                    f"def {test['name']}():",
                    f'    assert {func}("{test["case"]}-1", strict=True) == "{test["case"]}_1"',
                ]
        else:
            lines += [
                'import { describe, expect, it } from "vitest";',
                f"import {{ {', '.join(module['funcs'])} }} "
                f'from "../../src/{module["sub"]}/{module["mod"]}";',
                "",
            ]
            for test in module["tests"]:
                lines += [
                    f'describe("{test["func"]}", () => {{',
                    f'  it("{test["name"]}", () => {{',
                    f'    expect({test["func"]}("{test["case"]}-1", {{ strict: true }}))'
                    f'.toBe("{test["case"]}_1");',
                    "  });",
                    "});",
                    "",
                ]
        return "\n".join(lines) + "\n"

    def other_file(self, path: str) -> str:
        rng = self.rng
        if path.endswith((".md", ".txt")):
            body = [
                f"# {self.pkg}",
                "",
                f"{self.pkg} parses, validates and exports records.",
                "",
                "## Development",
                "",
                "```bash",
                "pip install -e '.[dev]'" if self.lang == "py" else "npm install",
                "pytest -q" if self.lang == "py" else "npx vitest run",
                "```",
                "",
            ]
            body += [
                f"See https://github.com/{self.pkg}-dev/{self.pkg}/issues/{rng.randint(10, 900)} "
                "for the roadmap."
            ]
            return "\n".join(body)
        return "\n".join(
            f"{k} = {json.dumps(v)}"
            for k, v in [
                ("name", self.pkg),
                ("version", f"{rng.randint(0, 3)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"),
                ("requires-python", ">=3.10"),
                ("license", "MIT"),
            ]
        )

    def tests_for(self, module: dict[str, Any]) -> list[dict[str, Any]]:
        if "tests" not in module:
            module["tests"] = []
            for func in module["funcs"]:
                for case in self.rng.sample(CASES, 2):
                    name = f"test_{func}_{case}" if self.lang == "py" else f"handles {case.replace('_', ' ')}"
                    module["tests"].append(
                        {"func": func, "case": case, "name": name, "id": self.test_id(module, func, name)}
                    )
        return module["tests"]

    def test_id(self, module: dict[str, Any], func: str, name: str) -> str:
        return f"{module['test']}::{name}" if self.lang == "py" else f"{module['test']} > {func} > {name}"

    def run_tests(self, target: str, failing: list[dict[str, Any]]) -> None:
        """A ``run_tests`` call; ``failing``: the tests that fail, each with its module and bug."""
        rng = self.rng
        scope = [
            m
            for m in self.modules
            if target in (".", "tests") or m["test"].startswith(target.split("::")[0].split(" > ")[0])
        ]
        for m in scope:
            self.tests_for(m)
        single = "::" in target or " > " in target
        bad = {t["test"]["id"] for t in failing}
        total = 1 if single else sum(len(m["tests"]) for m in scope)
        seconds = round(rng.uniform(0.3, 9.0), 2)
        if self.lang == "py":
            out = [
                "============================= test session starts ==============================",
                "platform linux -- Python 3.11.9, pytest-8.2.1, pluggy-1.5.0",
                f"rootdir: /workspace/{self.pkg}",
                "configfile: pyproject.toml",
                f"collected {total} item{'s' * (total != 1)}",
                "",
            ]
            if not single:
                for m in scope:
                    marks = "".join("F" if t["id"] in bad else "." for t in m["tests"])
                    out.append(f"{m['test']} {marks}".ljust(73) + f"[{rng.randint(1, 100):3d}%]")
            else:
                out.append(f"{target.split('::')[0]} {'F' if failing else '.'}".ljust(73) + "[100%]")
            if failing:
                out += [
                    "",
                    "=================================== FAILURES ===================================",
                ]
                for f in failing:
                    t, m, bug = f["test"], f["module"], f["module"]["bug"]
                    line = self.source(m)[1]["bug"]
                    err, msg = f["error"]
                    out += [
                        f" {t['name']} ".center(80, "_"),
                        "",
                        f"    def {t['name']}():",
                        f'>       assert {t["func"]}("{t["case"]}-1", strict=True) == "{t["case"]}_1"',
                        "",
                        f"{m['test']}:{rng.randint(8, 90)}: ",
                        "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _",
                        "",
                        f"{m['path']}:{line}: in {bug['func']}",
                        f"    {bug['old']}",
                        f"E   {err}: {msg}",
                    ]
                out += ["=========================== short test summary info ============================"]
                out += [f"FAILED {f['test']['id']} - {f['error'][0]}: {f['error'][1]}" for f in failing]
            passed = total - len(failing)
            counts = ", ".join(
                x
                for x in [f"{len(failing)} failed" if failing else "", f"{passed} passed" if passed else ""]
                if x
            )
            out.append(f" {counts} in {seconds}s ".center(80, "="))
        else:
            out = [f" RUN  v1.6.0 /workspace/{self.pkg}", ""]
            by_file: dict[str, list[dict[str, Any]]] = {}
            for f in failing:
                by_file.setdefault(f["module"]["test"], []).append(f)
            for m in scope:
                n_tests = 1 if single else len(m["tests"])
                if m["test"] in by_file:
                    out.append(
                        f" {ARROW} {m['test']} ({n_tests} tests | {len(by_file[m['test']])} failed) "
                        f"{rng.randint(4, 90)}ms"
                    )
                    out += [
                        f"   {CROSS} {f['test']['func']} > {f['test']['name']}" for f in by_file[m["test"]]
                    ]
                elif not single:
                    out.append(f" ✓ {m['test']} ({n_tests} tests) {rng.randint(2, 60)}ms")
            for f in failing:
                m, bug = f["module"], f["module"]["bug"]
                line = self.source(m)[1]["bug"]
                err, msg = f["error"]
                out += [
                    "",
                    "⎯⎯⎯⎯⎯⎯⎯ Failed Tests ⎯⎯⎯⎯⎯⎯⎯",
                    "",
                    f" FAIL  {f['test']['id']}",
                    f"{err}: {msg}",
                    f" {ARROW} {bug['func']} {m['path']}:{line}:{rng.randint(3, 30)}",
                    f"    {line}|   {bug['old']}",
                    f" {ARROW} {m['test']}:{rng.randint(5, 60)}:{rng.randint(3, 30)}",
                ]
            passed = total - len(failing)
            out += [
                "",
                f" Test Files  {len(by_file)} failed | {len(scope) - len(by_file)} passed ({len(scope)})"
                if failing
                else f" Test Files  {len(scope)} passed ({len(scope)})",
                f"      Tests  {len(failing)} failed | {passed} passed ({total})"
                if failing
                else f"      Tests  {passed} passed ({total})",
                f"   Duration  {seconds}s",
            ]
        arguments = (
            {"path": target}
            if not single or self.lang == "py"
            else {"path": target.split(" > ")[0], "name": target.split(" > ", 1)[1]}
        )
        self.tool("run_tests", arguments, "\n".join(out))

    def grep(self, pattern: str, must: list[str]) -> None:
        """A ``search_code`` call whose hits include lines of every path in ``must``."""
        rng = self.rng
        paths = list(must) + rng.sample(
            [m["path"] for m in self.modules] + [m["test"] for m in self.modules], rng.randint(4, 12)
        )
        hits = []
        for path in paths:
            for _ in range(rng.randint(1, 3)):
                hits.append(
                    f"{path}:{rng.randint(3, 160)}:    value = {pattern}(raw, strict=True)"
                    if self.lang == "py"
                    else f"{path}:{rng.randint(3, 160)}:  const value = {pattern}(raw, {{ strict: true }});"
                )
        hits.sort()
        self.tool("search_code", {"pattern": pattern}, "\n".join(hits))

    def issue_link(self) -> str:
        rng = self.rng
        return self.unique(
            lambda: (
                f"https://github.com/{rng.choice(PACKAGES)}-dev/{rng.choice(PACKAGES)}/issues/"
                f"{rng.randint(10, 4000)}"
            )
        )

    def error_lookup(self, error: tuple[str, str]) -> None:
        """A web search for an error message and a read of one result (an issue, a Q&A or docs page)."""
        rng = self.rng
        results = []
        for _ in range(rng.randint(6, 9)):
            if rng.random() < 0.5:
                link = self.issue_link()
            elif rng.random() < 0.5:
                slug = self.slug([error[0].lower()], 3)
                link = self.unique(
                    lambda slug=slug: (
                        f"https://stackoverflow.com/questions/{rng.randint(10**7, 8 * 10**7)}/{slug}"
                    )
                )
            else:
                page = rng.choice(["re", "json", "pathlib", "fixtures", "parametrize", "pep-0604"])
                link = self.unique(
                    lambda page=page: (
                        f"https://{rng.choice(DOC_SITES)}/{page}.html"
                        f"#{rng.choice(['usage', 'notes', 'examples'])}-{rng.randint(1, 40)}"
                    )
                )
            results.append(link)
        words = (
            ["python", "pytest", "split maxsplit"]
            if self.lang == "py"
            else ["typescript", "vitest", "node 20"]
        )
        rows = []
        for i, link in enumerate(results):
            if "stackoverflow" in link:
                content = f"I get {error[0]}: {error[1]} when the input ends with a separator."
            elif "github.com" in link:
                content = f"{error[0]} after upgrading to {rng.randint(1, 4)}.{rng.randint(0, 20)}"
            else:
                content = "If maxsplit is given, at most maxsplit splits are done "
                content += "(thus, the list will have at most maxsplit+1 elements)."
            title = f"{error[0]} {' '.join(rng.sample(SLUG_WORDS, 3))}"
            rows.append({"title": title, "url": link, "content": content, "score": round(0.95 - i * 0.04, 3)})
        self.tool("web_search", {"query": f"{error[0]}: {error[1]} {rng.choice(words)}"}, rows)
        self.issue_page(results[rng.randrange(min(6, len(results)))], error)

    def issue_page(self, link: str, error: tuple[str, str]) -> None:
        """A ``fetch_page`` of an issue thread about ``error``, with links to other issues and docs."""
        rng = self.rng

        def who() -> str:
            return f"{rng.choice(FIRST).lower()}{rng.randint(1, 999)}"

        lines = [f"# {error[0]}: {error[1]} {' '.join(rng.sample(SLUG_WORDS, 3))}", ""]
        lines.append(f"Opened {self.day(-700, -2):%b %d, %Y} by {who()} | {rng.randint(2, 40)} comments")
        for _ in range(rng.randint(5, 10)):
            other = self.issue_link()
            version = f"{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
            docs = f"https://{rng.choice(DOC_SITES)}/{rng.choice(['re', 'json', 'pathlib'])}.html"
            comment = rng.choice(
                [
                    f"I hit `{error[0]}: {error[1]}` after upgrading to {rng.choice(PACKAGES)} {version}.",
                    f"Same here. It only happens when the input has a trailing separator; see {other}.",
                    "The slice starts one element too late once the separator is doubled.",
                    f"Duplicate of {other}, closing. The fix landed in commit {rng.getrandbits(40):010x}.",
                    f"A workaround until the release: pass `strict=False` (docs: {docs}).",
                ]
            )
            package, module, func = rng.choice(PACKAGES), rng.choice(MODULES), rng.choice(VERBS)
            if self.lang == "py":
                trace = (
                    "Traceback (most recent call last):\n"
                    f'  File "/usr/lib/python3.11/site-packages/{package}/{module}.py", '
                    f"line {rng.randint(10, 400)}, in {func}_{rng.choice(NOUNS)}"
                )
            else:
                trace = f"    at {func} (node_modules/{package}/dist/{module}.js:{rng.randint(10, 400)}:17)"
            lines += [
                "",
                f"**{who()}** commented on {self.day(-700, -1):%b %d, %Y}",
                comment,
                "```",
                f"{trace}\n{error[0]}: {error[1]}",
                "```",
            ]
        self.tool("fetch_page", {"url": link}, "\n".join(lines))

    def coding(self) -> None:
        rng = self.rng
        self.repo()
        self.add(
            {
                "role": "system",
                "content": CODING_SYSTEM
                + f"\nRepository: /workspace/{self.pkg}. Today is {self.today.isoformat()}.",
            }
        )
        broken = rng.sample(self.modules, min(len(self.modules), rng.randint(3, 5)))
        failures = []
        for module in broken:
            self.bug(module)
            tests = [t for t in self.tests_for(module) if t["func"] == module["bug"]["func"]]
            err = rng.choice(ERRORS if self.lang == "py" else ERRORS_TS)
            noun = (
                module["bug"]["func"].split("_")[-1] if self.lang == "py" else self.arg(module["bug"]["func"])
            )
            for t in tests[: rng.randint(1, 2)]:
                failures.append({"test": t, "module": module, "error": (err[0], err[1].format(noun=noun))})
        change = rng.choice(CHANGES).format(sub=broken[0]["sub"])
        self.user(
            f"The test suite is red since {change}. Can you find out why and fix it? "
            "Open a PR when it's green."
        )
        self.listing(".")
        self.listing("src" if self.lang == "ts" else f"src/{self.pkg}")
        self.run_tests("tests", failures)
        self.say(
            f"{len(failures)} tests fail in {len({f['module']['path'] for f in failures})} modules. "
            "Starting with the first."
        )
        edited: list[str] = []
        fixed: list[str] = []
        remaining = list(failures)
        first_task = True
        while remaining:
            module = remaining[0]["module"]
            group = [f for f in remaining if f["module"] is module]
            remaining = [f for f in remaining if f["module"] is not module]
            path = module["path"]
            if not first_task and rng.random() < 0.4:
                self.user(
                    rng.choice(
                        [
                            f"Next, please look at {group[0]['test']['id']}.",
                            f"I think the problem is in {path}, can you check?",
                        ]
                    )
                )
            if rng.random() < 0.5:
                self.read(module["test"])
            if rng.random() < 0.5:
                self.listing(path.rsplit("/", 1)[0])
            self.read(path)
            for other in module["imports"][: rng.randint(0, 2)]:
                self.read(other["path"])
            self.grep(module["bug"]["func"], [path])
            if rng.random() < 0.6:
                caller = rng.choice([m for m in self.modules if m is not module])
                self.read(caller["path"])
            if rng.random() < 0.4:
                self.error_lookup(group[0]["error"])
            if rng.random() < 0.25 and not getattr(self, "moved", False):
                self.moved = True
                seen = "\n".join([json.dumps(m) for m in self.messages] + [m["path"] for m in self.modules])
                new = next(
                    moved
                    for folder in ("core", "common", "shared", "lib", "internal")
                    if (moved := path.replace(f"/{module['sub']}/", f"/{folder}/")) not in seen
                )
                self.used.add(new)
                step = self.tool(
                    "edit_file",
                    {"path": path, "old_str": module["bug"]["old"], "new_str": module["bug"]["new"]},
                    f"Error: {path} does not exist. git log: renamed to {new} in {rng.getrandbits(28):07x} "
                    f'("move {module["mod"]} into {new.split("/")[-2]}").',
                )
                self.conflict(step, path, new, f"{module['mod']} moved")
                self.say(f"The file was moved to {new}; editing it there.")
                module["path"] = path = new
            self.tool(
                "edit_file",
                {"path": path, "old_str": module["bug"]["old"], "new_str": module["bug"]["new"]},
                f"The file {path} has been edited: 1 replacement.",
            )
            edited.append(path)
            module["bug_fixed"] = True
            for f in group:
                self.run_tests(f["test"]["id"], [])
                fixed.append(f["test"]["id"])
            self.say(f"Fixed {path}; {', '.join(f['test']['name'] for f in group)} pass now.")
            first_task = False
            while self.chars < self.target_chars * len(fixed) / max(1, len(failures)) * 0.8:
                self.explore()
        self.run_tests("tests", [])
        if rng.random() < 0.5:
            self.user("Great. Before the PR, run the first test that failed once more, just to be sure.")
            self.run_tests(fixed[0], [])
        self.tool(
            "create_pull_request",
            {
                "title": f"Fix failures after {change}",
                "branch": f"fix/{self.slug([], 2)}",
                "files": edited,
                "tests": fixed,
            },
            {
                "number": rng.randint(100, 2400),
                "url": f"https://github.com/{self.pkg}-dev/{self.pkg}/pull/{rng.randint(100, 2400)}",
                "state": "open",
            },
        )
        self.say("The PR is open.")

    def explore(self) -> None:
        """Distractor steps: files, listings and searches no later call takes anything from."""
        rng = self.rng
        choice = rng.random()
        if choice < 0.35:
            self.read(rng.choice([m["path"] for m in self.modules] + self.others))
        elif choice < 0.55:
            self.listing(
                rng.choice(
                    ["docs", "tests", "src", *sorted({m["path"].rsplit("/", 1)[0] for m in self.modules})]
                )
            )
        elif choice < 0.8:
            module = rng.choice(self.modules)
            self.grep(rng.choice(module["funcs"]), [])
        else:
            error = rng.choice(ERRORS if self.lang == "py" else ERRORS_TS)
            self.error_lookup((error[0], error[1].format(noun=rng.choice(NOUNS))))

    def build(self, kind: str) -> dict[str, Any]:
        if kind == "research":
            self.research()
        else:
            self.coding()
        return {
            "traj": self.messages,
            "conflicts": self.conflicts,
            "info": {
                "generator": "benchmarks/research_traces.py",
                "kind": kind,
                "tool_calls": self.calls,
                "estimated_tokens": self.tokens,
            },
        }


def make_research_traces(n_traj: int = 8, seed: int = 0, target_tokens: int = 25_000) -> list[dict[str, Any]]:
    """``n_traj`` trajectories, research and coding in turn, of ``target_tokens`` tokens +-50 % each."""
    if n_traj <= 0 or target_tokens <= 0:
        raise ValueError(f"n_traj and target_tokens must be > 0, got {n_traj} and {target_tokens}")
    out = []
    for index in range(n_traj):
        rng = random.Random(seed * 1_000_003 + index)
        target = int(target_tokens * rng.uniform(0.5, 1.5))
        kind = ("research", "coding")[(index + seed) % 2]
        out.append(_Trajectory(rng, target).build(kind))
    return out


def main(argv: list[str] | None = None) -> int:
    return generator_main(
        argv,
        doc=__doc__,
        make=lambda n, seed, tokens: make_research_traces(n_traj=n, seed=seed, target_tokens=tokens),
        n=8,
        target_tokens=25_000,
        spread="+-50%%",
        describe=lambda item: (
            f"{item['info']['kind']}, {len(item['traj'])} messages, {item['info']['tool_calls']} tool "
            f"calls, ~{item['info']['estimated_tokens']} tokens, {len(item['conflicts'])} conflicts"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
