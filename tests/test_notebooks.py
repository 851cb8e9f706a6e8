"""The notebooks run top to bottom offline, as Jupyter runs them: code cells in order in one
namespace, while an event loop is running (an ``asyncio.run`` in a cell fails there)."""

import asyncio
import contextlib
import io
import json
from pathlib import Path

import pytest

NOTEBOOKS = {path.name: path for path in (Path(__file__).parent.parent / "notebooks").glob("*.ipynb")}


def run_notebook(path: Path) -> str:
    """Everything the notebook's cells print."""
    namespace: dict = {}
    printed = io.StringIO()

    async def kernel() -> None:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                exec(compile("".join(cell["source"]), path.name, "exec"), namespace)

    with contextlib.redirect_stdout(printed):
        asyncio.run(kernel())
    return printed.getvalue()


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_runs(name):
    assert run_notebook(NOTEBOOKS[name])


def test_the_quickstart_finds_each_booking_argument_in_the_context():
    printed = run_notebook(NOTEBOOKS["damc_core_quickstart.ipynb"])

    for argument in ("user_id", "flights", "payment_methods", "total_baggages"):
        assert any(line.startswith(argument) and line.endswith(" kept") for line in printed.splitlines())
