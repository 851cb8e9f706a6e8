"""Token counting stays offline when the user points TIKTOKEN_CACHE_DIR at an empty directory.

llama-index-core only uses its bundled BPE files while that variable is unset; with it set,
tiktoken tries to download. Each check runs in a fresh interpreter (encodings are cached per
process) with downloads routed to a closed port, so any download attempt fails at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import sys

    sys.path.insert(0, {root!r})
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.memory import ChatMemoryBuffer

    from damc_core import InMemoryStore
    from damc_llamaindex import DamcMemory, offline_tokenizer
    from tests.llamaindex_adapter.conftest import RecordingLLM
    from tests.llamaindex_adapter.scenario import FUNCTION_SCRIPT, QUESTION, TOOLS

    memory = DamcMemory.from_defaults(store=InMemoryStore())
    llm = RecordingLLM(script=list(FUNCTION_SCRIPT))

    async def go():
        return await FunctionAgent(tools=TOOLS, llm=llm).run(QUESTION, memory=memory)

    print(asyncio.run(go()))
    print(len(memory.memory.cards()), "cards")
    buffer = ChatMemoryBuffer.from_defaults(tokenizer_fn=offline_tokenizer())
    buffer.put_messages(memory.get_all())
    print(len(buffer.get()), "buffered")
    print(len(offline_tokenizer("o200k_base")("HAT107 credit_card_4421486")), "o200k tokens")
    """
)


def test_an_agent_runs_with_an_empty_tiktoken_cache_dir(tmp_path: Path):
    root = str(Path(__file__).parents[2])
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(tmp_path),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT.format(root=root)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Booked HAT107, reservation 4WQ150."
    assert lines[1] == "8 cards" and lines[2] == "8 buffered"
    assert list(tmp_path.iterdir()) == []  # nothing was downloaded into the user's cache directory
