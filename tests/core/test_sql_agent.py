"""An SQL agent over a real SQLite database, as LangChain's SQLDatabaseToolkit drives one: it lists
the tables, reads their schemas, runs a query, gets an SQL error and fixes the query. The tools
print what ``SQLDatabase`` prints: table names joined by ", ", each table's CREATE TABLE statement
with three sample rows, a query's rows as Python tuples, an error as SQLAlchemy words it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from damc_core import CardKind

TABLES = {
    "Artist": '"ArtistId" INTEGER NOT NULL, "Name" NVARCHAR(120), PRIMARY KEY ("ArtistId")',
    "Album": '"AlbumId" INTEGER NOT NULL, "Title" NVARCHAR(160) NOT NULL, "ArtistId" INTEGER NOT NULL, '
    'PRIMARY KEY ("AlbumId"), FOREIGN KEY("ArtistId") REFERENCES "Artist" ("ArtistId")',
    "Customer": '"CustomerId" INTEGER NOT NULL, "FirstName" NVARCHAR(40) NOT NULL, "LastName" NVARCHAR(20) '
    'NOT NULL, "Country" NVARCHAR(40), "Email" NVARCHAR(60) NOT NULL, PRIMARY KEY ("CustomerId")',
    "Invoice": '"InvoiceId" INTEGER NOT NULL, "CustomerId" INTEGER NOT NULL, '
    '"InvoiceDate" DATETIME NOT NULL, "BillingCountry" NVARCHAR(40), "Total" NUMERIC(10, 2) NOT NULL, '
    'PRIMARY KEY ("InvoiceId"), '
    'FOREIGN KEY("CustomerId") REFERENCES "Customer" ("CustomerId")',
}


@pytest.fixture
def db(tmp_path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(tmp_path / "chinook.db")
    for name, columns in TABLES.items():
        connection.execute(f'CREATE TABLE "{name}" ({columns})')
    artists = [(1, "AC/DC"), (2, "Accept"), (3, "Aerosmith")]
    connection.executemany("INSERT INTO Artist VALUES (?, ?)", artists)
    connection.executemany(
        "INSERT INTO Album VALUES (?, ?, ?)",
        [
            (1, "For Those About To Rock We Salute You", 1),
            (2, "Balls to the Wall", 2),
            (3, "Restless and Wild", 2),
        ],
    )
    connection.executemany(
        "INSERT INTO Customer VALUES (?, ?, ?, ?, ?)",
        [
            (1, "Luís", "Gonçalves", "Brazil", "luisg@embraer.com.br"),
            (2, "Leonie", "Köhler", "Germany", "leonekohler@surfeu.de"),
            (3, "François", "Tremblay", "Canada", "ftremblay@gmail.com"),
        ],
    )
    connection.executemany(
        "INSERT INTO Invoice VALUES (?, ?, ?, ?, ?)",
        [(i, i % 3 + 1, f"2021-01-{i:02d} 00:00:00", "", round(1.98 * i, 2)) for i in range(1, 13)],
    )
    yield connection
    connection.close()


def list_tables(db: sqlite3.Connection) -> str:
    return ", ".join(
        sorted(name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    )


def table_info(db: sqlite3.Connection, table_names: str) -> str:
    """What ``SQLDatabase.get_table_info`` prints: the CREATE TABLE statement, one column a line,
    then three sample rows in a comment."""
    infos = []
    for name in table_names.split(", "):
        columns = [row[1] for row in db.execute(f'PRAGMA table_info("{name}")')]
        rows = db.execute(f'SELECT * FROM "{name}" LIMIT 3').fetchall()
        parts = [part.strip() for part in TABLES[name].replace(", PRIMARY", ",\x00PRIMARY").split(", ")]
        create = ", \n".join(f"\t{part}".replace("\x00", "") for part in parts)
        sample = "\n".join("\t".join(map(str, row)) for row in rows)
        infos.append(
            f'\nCREATE TABLE "{name}" (\n{create}\n)\n\n/*\n3 rows from {name} table:\n'
            + "\t".join(columns)
            + f"\n{sample}\n*/"
        )
    return "\n\n".join(infos)


def run_query(db: sqlite3.Connection, query: str) -> str:
    """What ``SQLDatabase.run`` returns to ``sql_db_query``: the rows as tuples, or the error."""
    try:
        return str(db.execute(query).fetchall())
    except sqlite3.Error as error:
        return (
            f"Error: (sqlite3.{type(error).__name__}) {error}\n[SQL: {query}]\n"
            "(Background on this error at: https://sqlalche.me/e/20/e3q8)"
        )


class SqlAgent:
    """Feeds the memory what an agent's tool calls and the database's answers are."""

    def __init__(self, memory, msg, db: sqlite3.Connection) -> None:
        self.memory, self.msg, self.db, self.calls = memory, msg, db, 0

    def call(self, tool: str, arguments: dict[str, str], output: str):
        self.calls += 1
        call_id = f"call_{self.calls}"
        self.memory.observe(self.msg.call(call_id, tool, arguments))
        return self.memory.observe(self.msg.result(call_id, tool, output))

    def list_tables(self):
        return self.call("sql_db_list_tables", {"tool_input": ""}, list_tables(self.db))

    def schema(self, table_names: str):
        return self.call("sql_db_schema", {"table_names": table_names}, table_info(self.db, table_names))

    def query(self, query: str):
        return self.call("sql_db_query", {"query": query}, run_query(self.db, query))


TOP_COUNTRIES = (
    "SELECT c.Country, SUM(i.Total) AS TotalSales FROM Invoice i JOIN Customer c "
    "ON c.CustomerId = i.CustomerId GROUP BY c.Country ORDER BY TotalSales DESC LIMIT 5"
)


def test_a_query_links_back_to_the_schema_its_table_and_column_names_came_from(memory, msg, db):
    agent = SqlAgent(memory, msg, db)
    memory.observe(msg.user("Which country's customers spent the most?"))
    tables = agent.list_tables()
    schema = agent.schema("Customer, Invoice")
    albums = agent.schema("Album")
    agent.query(TOP_COUNTRIES)

    query_call = memory.cards()[-2]
    assert query_call.id in memory.card(schema.id).decision_links
    # its tables and columns came from the schema, which holds more of them than the table list
    assert query_call.id not in memory.card(tables.id).decision_links
    assert memory.card(albums.id).decision_links == ()  # no name of the Album table is in the query
    assert {"customerid", "country", "invoice"} <= memory.card(schema.id).used_terms
    assert "select" not in memory.card(schema.id).used_terms  # keywords are no names


def test_the_words_of_a_sentence_argument_are_no_links(memory, msg):
    memory.observe(msg.call("n", "get_note", {"id": "n1"}))
    note = memory.observe(msg.result("n", "get_note", {"note": "select the cheapest", "tag": "Customer"}))
    memory.observe(msg.call("t", "think", {"thought": "Select the cheapest flight for the Customer, please"}))

    assert memory.card(note.id).decision_links == ()  # only a query's words are names


def test_a_long_schema_keeps_every_create_table_statement_and_a_skeleton_names_tables_and_columns(
    memory, msg, db
):
    schema = SqlAgent(memory, msg, db).schema("Album, Artist, Customer, Invoice")
    assert len(table_info(db, "Album, Artist, Customer, Invoice")) > memory.encoder.max_text_chars

    summary = memory.compressor.render(schema)
    for name in TABLES:
        assert f'CREATE TABLE "{name}"' in summary
    assert '"ArtistId" INTEGER NOT NULL' in summary and '"Total" NUMERIC(10, 2) NOT NULL' in summary
    assert "1\tFor Those About To Rock We Salute You\t1" in summary  # sample rows in the room left
    skeleton = memory.compressor.render(schema, detail="skeleton")
    assert "Album(AlbumId, Title, ArtistId); Artist(ArtistId, Name); Customer(CustomerId, " in skeleton
    assert "Invoice(InvoiceId, CustomerId, InvoiceDate, BillingCountry, Total)" in skeleton
    assert "2021-01-01" not in skeleton  # a sample row's date is no name a query takes
    assert {"album", "title", "artist", "name", "total"} <= schema.terms


def test_a_small_budget_keeps_the_schema_s_columns_beside_the_error_and_the_fixed_query(memory, msg, db):
    agent = SqlAgent(memory, msg, db)
    memory.observe(msg.user("Which country's customers spent the most?"))
    agent.list_tables()
    agent.schema("Customer, Invoice")
    error = agent.query(TOP_COUNTRIES.replace("c.Country", "c.Countryy"))
    agent.query(TOP_COUNTRIES)

    memory_section = memory.build(budget=400).messages[0]["content"]
    assert "Customer(CustomerId, FirstName, LastName, Country, Email)" in memory_section
    assert "Invoice(InvoiceId, CustomerId, InvoiceDate, BillingCountry, Total)" in memory_section
    assert error.kind is CardKind.TOOL_ERROR and "no such column: c.Countryy" in memory_section


def test_the_answer_to_an_earlier_query_is_kept_beside_the_answers_to_later_different_queries(
    memory, msg, db
):
    agent = SqlAgent(memory, msg, db)
    memory.observe(msg.user("How many customers, invoices and albums are there, and the biggest invoice?"))
    customers = agent.query("SELECT COUNT(*) AS Customers FROM Customer")
    agent.query("SELECT COUNT(*) AS Invoices FROM Invoice")
    agent.query("SELECT COUNT(*) AS Albums FROM Album")
    agent.query("SELECT InvoiceId, Total FROM Invoice ORDER BY Total DESC LIMIT 1")
    agent.query("SELECT CustomerId, FirstName FROM Customer ORDER BY CustomerId")

    context = memory.build(budget=1000)
    assert next(d for d in context.decisions if d.card_id == customers.id).kept
    assert (
        f"[{customers.id}] sql_db_query(query=SELECT COUNT(*) AS Customers FROM Customer)" in context.memory
    )


def test_a_rerun_of_the_same_query_is_the_newer_view_of_its_answer(memory, msg, db):
    agent = SqlAgent(memory, msg, db)
    first = agent.query("SELECT COUNT(*) FROM Invoice")
    db.execute("INSERT INTO Invoice VALUES (13, 1, '2021-02-01 00:00:00', '', 0.99)")
    rerun = agent.query("select count(*)\n  from Invoice")
    agent.query("SELECT COUNT(*) FROM Album")

    value = {d.card_id: d.value for d in memory.build(budget=1000).decisions}
    assert value[first.id] < value[rerun.id]


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ("SELECT COUNT(*) AS Customers FROM Customer", "rows (1): Customers\n 3"),
        ("SELECT MAX(Total) FROM Invoice", "rows (1): MAX(Total)\n 23.76"),
        ("SELECT Country FROM Customer ORDER BY Country", "rows (3): Country\n Brazil\n Canada\n Germany"),
    ],
)
def test_a_one_column_answer_is_a_table_of_that_column_at_every_detail(memory, msg, db, query, shown):
    answer = SqlAgent(memory, msg, db).query(query)

    for detail in ("full", "key", "skeleton"):
        assert memory.compressor.render(answer, detail=detail).endswith(f"-> \n {shown}")


def test_rows_of_one_item_without_a_query_naming_them_stay_a_list(memory, msg):
    memory.observe(msg.call("g", "get_groups", {"team": "ops"}))
    groups = memory.observe(msg.result("g", "get_groups", "[['alice'], ['bob']]"))

    assert not groups.tables and [fact.value for fact in groups.facts] == ["[alice]", "[bob]"]


def test_an_sql_error_that_quotes_its_query_shows_the_query_once(memory, msg, db):
    broken = TOP_COUNTRIES.replace("c.Country", "c.Countryy")
    error = SqlAgent(memory, msg, db).query(broken)

    card = memory.compressor.render(error)
    assert card.count(broken) == 1  # in the error's [SQL: ...] line; the call writes query=…
    assert "sql_db_query(query=…) FAILED" in card and "no such column: c.Countryy" in card
