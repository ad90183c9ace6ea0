"""The dev collection for the relevance gate: six vaults of different shapes, each with its
answerable questions (same-language and cross-language, told apart by script) and the prompts
it cannot answer (coding requests and general questions in both languages, another corpus's
questions, the corpus's own unanswerable set).

  tldr          880 tldr commands, each page in ONE language (seeded halves): short command
                pages; questions are each page's description in both languages
  scifact       SciFact abstracts (English); the test claims, and bench/corpora/scifact_zh
                (the same claims in Chinese: cross-language)
  cmrc          CMRC 2018 dev paragraphs (Chinese Wikipedia); its questions, and
                bench/corpora/cmrc_en (English questions: cross-language)
  conversations bench/corpora/conversations: long multi-speaker session notes, with questions
                in the notes' language and in the other one (questions_xlang.jsonl)
  personal_kb   bench/corpora/personal_kb: one developer's mixed English/Chinese vault
  team          bench/prompts/team_vault: 16 short ops notes, most in Chinese

`dump` runs every prompt through the real pipeline once (`search.fetch_candidates` and
`search.fuse_candidates`, as `vaultmem context` and the hook do) and keeps what the gate sees
(the fused hits and the vector list's cosines), so that the gate's settings can be chosen and
judged leave-one-corpus-out without searching again (bench/relevance.py).
"""

from __future__ import annotations

import json
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _corpora import bench_dir
from _data import beir_set, corpus_files, tldr_clone, tldr_pages

BENCH = Path(__file__).resolve().parent
CORPORA = BENCH / "corpora"
PROMPTS = BENCH / "prompts"
# At most this many answerable questions a corpus and language pair (seeded sample).
MAX_QUESTIONS = 220


def is_cjk(text: str) -> bool:
    cjk = sum(1 for ch in text if "\u2e80" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff")
    letters = sum(1 for ch in text if ch.isalpha())
    return cjk > 0 and cjk >= 0.3 * max(letters, 1)


def lang_of(text: str) -> str:
    return "zh" if is_cjk(text) else "en"


@dataclass(frozen=True)
class Prompt:
    text: str
    relevant: frozenset[str]  # empty: unanswerable
    group: str  # "same", "cross", or for unanswerable prompts their set ("coding en", ...)
    lang: str


@dataclass
class DevCorpus:
    name: str
    files: dict[str, str]
    prompts: list[Prompt] = field(default_factory=list)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


def _answerable(files: dict[str, str], items: list[tuple[str, list[str]]]) -> list[Prompt]:
    """Answerable prompts, "same" or "cross" by the scripts of the question and its notes;
    at most MAX_QUESTIONS of each (seeded)."""
    note_lang = {p: lang_of(t[:2000]) for p, t in files.items()}
    out: dict[str, list[Prompt]] = {}
    for text, rel in items:
        rel = [r for r in rel if r in files]
        if not rel:
            continue
        ql = lang_of(text)
        group = "same" if any(note_lang[r] == ql for r in rel) else "cross"
        out.setdefault(f"{group}-{ql}", []).append(Prompt(text, frozenset(rel), group, ql))
    picked: list[Prompt] = []
    for key in sorted(out):
        items_ = out[key]
        if len(items_) > MAX_QUESTIONS:
            items_ = random.Random(27).sample(items_, MAX_QUESTIONS)
        picked += items_
    return picked


def _tldr() -> DevCorpus:
    pages = tldr_pages(tldr_clone(bench_dir()))
    pages = {c: p for c, p in pages.items() if "alias" not in p["en"][0].lower()}
    order = sorted(pages)
    random.Random(7).shuffle(order)
    lang = {c: "en" if i % 2 == 0 else "zh" for i, c in enumerate(order)}
    files = {f"{lang[c]}/{c}.md": pages[c][lang[c]][1] + "\n" for c in sorted(pages)}
    items = [(pages[c][ql][0], [f"{lang[c]}/{c}.md"]) for c in sorted(pages) for ql in ("en", "zh")]
    return DevCorpus("tldr", files, _answerable(files, items))


def _scifact() -> DevCorpus:
    corpus, queries, qrels, qids = beir_set("scifact", 1500)
    files = corpus_files(corpus)
    items = [(queries[q], [f"docs/{d}.md" for d in qrels[q]]) for q in qids]
    for d in _jsonl(CORPORA / "scifact_zh" / "questions.jsonl"):
        items.append((d["query"], [f"docs/{r}.md" for r in d["relevant"]]))
    return DevCorpus("scifact", files, _answerable(files, items))


def _cmrc() -> DevCorpus:
    corpus, queries, qrels, qids = beir_set("cmrc2018_dev")
    files = corpus_files(corpus)
    items = [(queries[q], [f"docs/{d}.md" for d in qrels[q]]) for q in qids]
    for d in _jsonl(CORPORA / "cmrc_en" / "questions.jsonl"):
        items.append((d["query"], [f"docs/{r}.md" for r in d["relevant"]]))
    return DevCorpus("cmrc", files, _answerable(files, items))


def _vault_files(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(root.rglob("*.md"))
    }


def _own_corpus(name: str) -> DevCorpus:
    base = CORPORA / name
    files = _vault_files(base / "vault")
    items = [(d["query"], d["relevant"]) for d in _jsonl(base / "questions.jsonl")]
    # Questions asked in the other language than the note (conversations: Chinese questions on
    # English sessions and English ones on Chinese sessions).
    if (base / "questions_xlang.jsonl").is_file():
        items += [(d["query"], d["relevant"]) for d in _jsonl(base / "questions_xlang.jsonl")]
    c = DevCorpus(name, files, _answerable(files, items))
    for d in _jsonl(base / "unanswerable.jsonl"):
        c.prompts.append(Prompt(d["query"], frozenset(), f"own {d['lang']}", d["lang"]))
    return c


def _team() -> DevCorpus:
    root = PROMPTS / "team_vault"
    files = {f"notes/{p.name}": p.read_text(encoding="utf-8") for p in sorted(root.glob("*.md"))}
    items = []
    for line in (PROMPTS / "team_questions.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        if not line or line.startswith("#") or line.startswith("en\t"):
            continue
        en, zh, rel = line.split("\t")
        paths = [f"notes/{r}" for r in rel.split(",")]
        items += [(en, paths), (zh, paths)]
    return DevCorpus("team", files, _answerable(files, items))


def _unanswerable_sets() -> dict[str, list[Prompt]]:
    out: dict[str, list[Prompt]] = {}
    for name in ("coding_en", "coding_zh", "general_en", "general_zh"):
        kind, lang = name.split("_")
        out[f"{kind} {lang}"] = [
            Prompt(d["query"], frozenset(), f"{kind} {lang}", lang)
            for d in _jsonl(CORPORA / "unanswerable" / f"{name}.jsonl")
        ]
    return out


def collection() -> list[DevCorpus]:
    """The six dev corpora, each with its answerable and unanswerable prompts."""
    corpora = [
        _tldr(),
        _scifact(),
        _cmrc(),
        _own_corpus("conversations"),
        _own_corpus("personal_kb"),
        _team(),
    ]
    shared = _unanswerable_sets()
    by_name = {c.name: c for c in corpora}
    # Another corpus's questions: the shape of a question this vault does not hold.
    foreign = {
        "tldr": ("conversations", "scifact"),
        "scifact": ("cmrc", "conversations"),
        "cmrc": ("scifact", "personal_kb"),
        "conversations": ("scifact", "cmrc"),
        "personal_kb": ("conversations", "scifact"),
        "team": ("scifact", "cmrc"),
    }
    for c in corpora:
        for group in shared.values():
            c.prompts += group
        for other in foreign[c.name]:
            pool = [p for p in by_name[other].prompts if p.relevant]
            for p in random.Random(28).sample(pool, min(60, len(pool))):
                c.prompts.append(Prompt(p.text, frozenset(), f"foreign {p.lang}", p.lang))
    return corpora


@dataclass
class Searched:
    """One prompt as the gate sees it: the fused hits and the query's statistics, as the
    library computes them (`search.fuse_candidates`, `search.query_stats`)."""

    prompt: Prompt
    content_free: bool
    hits: list[Any]  # search.Hit, best first (the ungated fused ranking, 20 at most)
    stats: Any  # search.QueryStats


# Bumped when Searched changes: an older dump is searched again.
DUMP_VERSION = 2


def dump(
    corpus: DevCorpus, conn: Any, vault_id: int, embedder: Any, mode: str = "hybrid"
) -> list[Searched]:
    from vaultmem.search import (
        Mode,
        fetch_candidates,
        fuse_candidates,
        fusion_for,
        is_content_free,
        query_stats,
    )

    fusion = fusion_for(embedder.model_id)
    out = []
    for p in corpus.prompts:
        c = fetch_candidates(conn, vault_id, p.text, embedder, k=10, mode=Mode(mode))
        hits = fuse_candidates(c, fusion)[:20]
        out.append(Searched(p, is_content_free(p.text), hits, query_stats(c)))
    return out


# The second opinion's list weights the warm dumps are fused with (`Fusion.agnostic_weight`):
# 0 is the second opinion as a judge only; relevance.py chooses among them leave-one-out.
AGNOSTIC_WEIGHTS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)


def dump_warm(
    corpus: DevCorpus, conn: Any, vault_id: int, embedder: Any, opinion: Any, base: Any
) -> dict[float, list[Searched]]:
    """Every prompt searched once as the warm path searches it with the profile `base` (the
    second opinion's list, `base.agnostic_candidates` long, and its cosines in the candidate
    statement), fused with each of AGNOSTIC_WEIGHTS."""
    import dataclasses

    from vaultmem.search import fetch_candidates, fuse_candidates, is_content_free, query_stats

    opinion.fill(conn, vault_id, go_on=lambda: True)  # as the warm service's fill leaves it
    out: dict[float, list[Searched]] = {w: [] for w in AGNOSTIC_WEIGHTS}
    for p in corpus.prompts:
        c = fetch_candidates(
            conn, vault_id, p.text, embedder, k=10, fusion=base, agnostic=opinion.query(p.text)
        )
        stats = query_stats(c)
        for w in AGNOSTIC_WEIGHTS:
            hits = fuse_candidates(c, dataclasses.replace(base, agnostic_weight=w))[:20]
            out[w].append(Searched(p, is_content_free(p.text), hits, stats))
    return out


def _cached(
    corpus: DevCorpus,
    embedder: Any,
    settings: Any,
    root: Path,
    suffix: str,
    sig: Any,
    make: Any,
) -> Any:
    """`make(conn, vault_id)` for this corpus, cached under VAULTMEM_BENCH_DIR: a saved dump is
    used while its version, prompts (`sig`) and note count are those of today."""
    from vaultmem.store import db

    key = f"dump-{corpus.name}-{embedder.model_id.replace(':', '_')}{suffix}.pkl"
    path = bench_dir() / key
    if path.is_file():
        saved = pickle.loads(path.read_bytes())
        if (saved.get("version"), saved["sig"], saved["files"]) == (
            DUMP_VERSION,
            sig,
            len(corpus.files),
        ):
            return saved["rows"]
    with db.connect(settings) as conn:
        vault = db.find_vault(conn, root)
        assert vault is not None
        rows = make(conn, vault.id)
    saved = {"version": DUMP_VERSION, "sig": sig, "files": len(corpus.files), "rows": rows}
    path.write_bytes(pickle.dumps(saved))
    return rows


def load_or_dump_warm(
    corpus: DevCorpus, embedder: Any, settings: Any, root: Path, opinion: Any, base: Any
) -> dict[float, list[Searched]]:
    """`dump_warm`, cached under VAULTMEM_BENCH_DIR like `load_or_dump` (one dump per length of
    the second opinion's list)."""
    sig = (
        sorted((p.text, p.group) for p in corpus.prompts),
        AGNOSTIC_WEIGHTS,
        base.agnostic_candidates,
    )
    return _cached(
        corpus,
        embedder,
        settings,
        root,
        f"-warm{base.agnostic_candidates}",
        sig,
        lambda conn, vault_id: dump_warm(corpus, conn, vault_id, embedder, opinion, base),
    )


def load_or_dump(
    corpus: DevCorpus, embedder: Any, settings: Any, root: Path, mode: str = "hybrid"
) -> list[Searched]:
    """Every prompt of `corpus` searched once in `mode` (cached under VAULTMEM_BENCH_DIR)."""
    sig = sorted((p.text, p.group) for p in corpus.prompts)
    return _cached(
        corpus,
        embedder,
        settings,
        root,
        "" if mode == "hybrid" else f"-{mode}",
        sig,
        lambda conn, vault_id: dump(corpus, conn, vault_id, embedder, mode),
    )
