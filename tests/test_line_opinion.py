"""The second opinion read by line: the fill keeps a vector per line of each chunk
(`memory_primary.agnostic_lines`), a search gives each judged hit the larger of its chunk's
cosine and its best line's, and a passage in another language is anchored on that line. The
real Universal Sentence Encoder, a real database."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import Vault
from test_relevance_gate import _indexed

from vaultmem.agent import delivery
from vaultmem.config import load_settings
from vaultmem.embed.second_opinion import opinion_lines
from vaultmem.index.markdown import embedding_input
from vaultmem.search import Delivery, Hit, SecondOpinion
from vaultmem.store import agnostic_vectors, db

USE = "use:universal-sentence-encoder-multilingual-3"
ANSWER = "Priya: We decided the glasswing canary deploy runs every Tuesday at 3 pm."
# "When does the canary deployment run each week?": no word of the note, no Latin name.
QUESTION = "金丝雀部署每周什么时候运行？"

_TURNS = [
    "Marco: Morning all, action items first.",
    "Lena: Billing review moved to Thursday.",
    "Tom: I owe a note on flaky tests.",
    "Marco: News from the Lisbon interviews?",
    "Lena: Onboarding emails are too long.",
    "Tom: Drop the second email then.",
    "Marco: Try it for a month.",
    "Aiko: We move to floor four in June.",
    "Lena: Do the rooms keep their names?",
    "Aiko: Mostly. The small one goes quiet.",
    "Tom: Coffee machine broke on Monday.",
    "Marco: I will chase facilities.",
    "Aiko: Two data candidates in the final.",
    "Lena: I can sit on the panel.",
    "Tom: Holiday rota before December?",
    "Marco: Fill in the sheet by Friday.",
    "Aiko: New laptops arrive next week.",
    "Lena: My keyboard sticks, me first.",
    "Tom: Weekend traffic dipped.",
    "Marco: Seasonal, same as last year.",
    ANSWER,
    "Lena: Good, support knows then.",
    "Tom: Portuguese strings have typos.",
    "Aiko: I will ask the vendor to fix them.",
    "Marco: The board deck needs churn.",
    "Lena: I will pull the numbers today.",
    "Tom: The cloud bill rose twelve percent.",
    "Aiko: Mostly log storage.",
    "Marco: Keep ninety days, not a year.",
    "Lena: Legal wants audit logs kept.",
    "Tom: Fine, debug logs go sooner.",
    "Aiko: Team lunch at the Thai place.",
    "Marco: Book a table for eight.",
    "Lena: Who waters the plants in May?",
    "Tom: Me, they are by my desk.",
    "Aiko: Security training due soon.",
    "Marco: Half of us have not started.",
    "Lena: Offsite in the mountains?",
    "Tom: Avoid the school holidays.",
    "Marco: That's all, thanks everyone.",
]
MEETING = "# Weekly team meeting\n\n" + "\n".join(_TURNS) + "\n"
NOTES = {
    "meetings/weekly.md": MEETING,
    "recipes/bread.md": "# Sourdough\n\nFeed the starter the night before and bake at 230 °C.\n",
    "travel/kyoto.md": "# Kyoto trip\n\nThe temples open at eight; buy the bus pass at the station.\n",
    "garden/tomatoes.md": "# Tomatoes\n\nWater them every morning and pinch out the side shoots.\n",
}


@pytest.fixture
def meeting_vault(vault: Vault, db_url: str, monkeypatch: pytest.MonkeyPatch) -> Vault:
    monkeypatch.setenv("VAULTMEM_SECOND_OPINION", "0")  # each test fills (or not) itself
    _indexed(vault, NOTES, monkeypatch)
    monkeypatch.delenv("VAULTMEM_SECOND_OPINION")
    return vault


@pytest.fixture
def filled(meeting_vault: Vault, opinion: SecondOpinion) -> Iterator[tuple[Any, int]]:
    """An open connection to the meeting vault, its second-opinion vectors filled, and its id."""
    with db.connect(load_settings(meeting_vault.root)) as conn:
        vault = db.find_vault(conn, meeting_vault.root)
        assert vault is not None
        opinion.fill(conn, vault.id, go_on=lambda: True)
        yield conn, vault.id


def _meeting_hit(conn: Any, vault_id: int, root: Any, opinion: SecondOpinion) -> Hit:
    """The meeting note's hit, as a search with the second opinion judges QUESTION."""
    from vaultmem.embed import get_embedder
    from vaultmem.search import judge

    embedder = get_embedder(load_settings(root))
    verdicts = judge(conn, vault_id, QUESTION, embedder, k=5, second_opinion=opinion)
    [hit] = [v.hit for v in verdicts[:5] if v.hit.path == "meetings/weekly.md"]
    return hit


def _cosines(opinion: SecondOpinion, hit: Hit) -> tuple[float, np.ndarray]:
    """The model's cosine between QUESTION and the hit's chunk, and each of its lines'."""
    q = opinion.embedder.embed_query(QUESTION)
    chunk = opinion.embedder.embed_documents([embedding_input(hit.heading, hit.text)])[0]
    return float(chunk @ q), opinion.embedder.embed_documents(opinion_lines(hit.text)) @ q


def test_a_chunks_lines_are_its_lines_long_enough_to_read_on_their_own() -> None:
    text = "  Lena: yes  \n\n--\nok\n- \nTom: no.\n" + "\n".join(f"line {i}" for i in range(90))
    lines = opinion_lines(text)
    assert lines[:2] == ["Lena: yes", "Tom: no."] and len(lines) == 80


def test_the_fill_keeps_a_float16_vector_per_line_and_embeds_lines_of_cached_chunks(
    meeting_vault: Vault, opinion: SecondOpinion
) -> None:
    from test_second_opinion import CountingOpinion

    counting = CountingOpinion(opinion)
    dim = opinion.embedder.dimension
    with db.connect(load_settings(meeting_vault.root)) as conn:
        vault = db.find_vault(conn, meeting_vault.root)
        assert vault is not None
        assert counting.fill(conn, vault.id, go_on=lambda: True) > 0
        rows = conn.execute(
            "SELECT content, agnostic_lines FROM memory_primary WHERE vault_id = %s",
            (vault.id,),
        ).fetchall()
        n_lines = 0
        for r in rows:
            lines = opinion_lines(r["content"])
            n_lines += len(lines)
            stored = np.frombuffer(bytes(r["agnostic_lines"]), dtype=np.float16)
            assert stored.size == len(lines) * dim  # one float16 row per line, in order
            fresh = opinion.embedder.embed_documents(lines)
            got = stored.reshape(-1, dim).astype(np.float32)
            assert np.allclose(np.sum(got * fresh, axis=1), 1.0, atol=2e-3)
        assert counting.embedded == len(rows) + n_lines  # each chunk once, each line once
        assert agnostic_vectors.missing_agnostic(conn, vault.id, USE) == []
        # a chunk written again gets its chunk vector from the shared cache, its lines anew
        conn.execute(
            "UPDATE memory_primary SET agnostic = NULL, agnostic_lines = NULL WHERE vault_id = %s",
            (vault.id,),
        )
        conn.commit()
        assert agnostic_vectors.missing_agnostic(conn, vault.id, USE) != []
        counting.fill(conn, vault.id, go_on=lambda: True)
        assert counting.embedded == len(rows) + 2 * n_lines
        assert agnostic_vectors.missing_agnostic(conn, vault.id, USE) == []
        # another second-opinion model retires the lines with the vectors
        agnostic_vectors.retire_agnostic(conn, vault.id, "use:another-model")
        left = conn.execute(
            "SELECT count(*) AS n FROM memory_primary"
            " WHERE vault_id = %s AND agnostic_lines IS NOT NULL",
            (vault.id,),
        ).fetchone()
        assert left is not None and left["n"] == 0


def test_a_fill_told_to_stop_mid_chunk_stores_none_of_its_lines(
    meeting_vault: Vault, opinion: SecondOpinion
) -> None:
    from vaultmem.index.agnostic import FILL_LINES

    assert len(opinion_lines(MEETING)) > FILL_LINES  # its lines take two steps
    asked = 0

    def go_on() -> bool:
        # the batch (every note's chunk vector), garden/'s lines, the meeting's first step of
        # lines; then stop
        nonlocal asked
        asked += 1
        return asked <= 3

    with db.connect(load_settings(meeting_vault.root)) as conn:
        vault = db.find_vault(conn, meeting_vault.root)
        assert vault is not None
        opinion.fill(conn, vault.id, go_on=go_on)
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE agnostic_lines IS NOT NULL) AS lines,"
            " count(*) FILTER (WHERE agnostic IS NOT NULL) AS vectors"
            " FROM memory_primary WHERE vault_id = %s AND path = 'meetings/weekly.md'",
            (vault.id,),
        ).fetchone()
        assert row is not None and row["lines"] == 0 and row["vectors"] == 1
        garden = conn.execute(
            "SELECT agnostic_lines FROM memory_primary"
            " WHERE vault_id = %s AND path = 'garden/tomatoes.md'",
            (vault.id,),
        ).fetchone()
        assert garden is not None and garden["agnostic_lines"] is not None


def test_a_judged_hit_reads_its_best_line_and_its_passage_quotes_it(
    meeting_vault: Vault, opinion: SecondOpinion, filled: tuple[Any, int]
) -> None:
    conn, vault_id = filled
    hit = _meeting_hit(conn, vault_id, meeting_vault.root, opinion)
    chunk, lines = _cosines(opinion, hit)
    read = opinion_lines(hit.text)
    # the answering line is the one the model puts closest to the question, well above the
    # chunk as a whole (forty turns averaged)
    assert hit.agnostic_line == int(np.argmax(lines)) == read.index(ANSWER)
    assert hit.agnostic == pytest.approx(float(lines.max()), abs=2e-3)
    assert hit.agnostic > chunk + 0.05
    # the prompt's words locate no line: the passage is anchored on the line the opinion read
    cut = delivery.passage(hit, {}, delivery.PASSAGE_ROOM)
    assert not cut.located and ANSWER in cut.text
    first_lines = delivery.passage(
        dataclasses.replace(hit, agnostic_line=None), {}, delivery.PASSAGE_ROOM
    )
    assert ANSWER not in first_lines.text
    plan = delivery.plan([dataclasses.replace(hit, delivery=Delivery.PASSAGE)], prompt=QUESTION)
    [item] = plan.items
    assert item.form is delivery.Form.PASSAGE and ANSWER in item.body


def test_a_judged_hit_without_its_lines_keeps_its_chunks_cosine_and_wakes_the_fill(
    meeting_vault: Vault, opinion: SecondOpinion, filled: tuple[Any, int]
) -> None:
    conn, vault_id = filled
    conn.execute(
        "UPDATE memory_primary SET agnostic_lines = NULL"
        " WHERE vault_id = %s AND path = 'meetings/weekly.md'",
        (vault_id,),
    )
    conn.commit()
    opinion.missing.clear()
    hit = _meeting_hit(conn, vault_id, meeting_vault.root, opinion)
    chunk, _ = _cosines(opinion, hit)
    assert hit.agnostic == pytest.approx(chunk, abs=1e-4) and hit.agnostic_line is None
    assert opinion.missing.is_set()
