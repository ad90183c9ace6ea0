"""Check the cross-language, unanswerable and personal-KB dev corpora in bench/corpora/.

    python3 bench/corpora/check_xlang.py [--data DIR]

Every file must parse; every id must exist in the shared data and carry exactly its qrels;
every relevant path must exist; every text must look like its declared language by script;
nothing may repeat. Prints one line per corpus, then each problem; exit status 1 if any.
The shared data is found the way bench/_data.py finds it: <repo>/../shared/data.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
PROMPTS = REPO / "bench" / "prompts"

CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
KANA_HANGUL = re.compile(r"[\u3040-\u30ff\uac00-\ud7af]")
LATIN = re.compile(r"[A-Za-z]")

problems: list[str] = []


def problem(where: str, what: str) -> None:
    problems.append(f"{where}: {what}")


def norm(text: str) -> str:
    """The form two prompts are compared in: NFKC, case-folded, spaces and end punctuation gone."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return re.sub(r"[\s.?!。？！,，]+", "", text)


def prose(text: str) -> str:
    """The natural-language part of a prompt: lines with Han characters, `code spans` removed.
    A Chinese request quoting a traceback or a snippet is still a Chinese request."""
    lines = [line for line in text.splitlines() if CJK.search(line)] or [text]
    return re.sub(r"`[^`]*`", " ", "\n".join(lines))


def looks_like(lang: str, text: str) -> str | None:
    """Why `text` does not look like `lang` (by script), or None.

    English: no Chinese, Japanese or Korean characters at all. Chinese: a Han character at
    least, no kana or hangul, and Han characters at least 15 % of the letters of its prose
    (Chinese prompts and claims carry Latin identifiers, commands and gene names)."""
    latin = len(LATIN.findall(text))
    if lang == "en":
        if CJK.search(text) or KANA_HANGUL.search(text):
            return f"English text contains CJK characters: {text[:60]!r}"
        if latin < 2:
            return f"English text has no Latin letters: {text[:60]!r}"
        return None
    if lang == "zh":
        if KANA_HANGUL.search(text):
            return f"Chinese text contains kana or hangul: {text[:60]!r}"
        words = prose(text)
        han, latin = len(CJK.findall(words)), len(LATIN.findall(words))
        if han < 1 or han < 0.15 * (han + latin):
            return (
                f"Chinese text has too few Han characters ({han} Han, {latin} Latin): {text[:60]!r}"
            )
        return None
    return f"unknown language {lang!r}"


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    if not path.is_file():
        problem(str(path.relative_to(REPO)), "missing")
        return
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                problem(f"{path.relative_to(REPO)}:{n}", "blank line")
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                problem(f"{path.relative_to(REPO)}:{n}", f"not JSON ({e})")
                continue
            if not isinstance(row, dict):
                problem(f"{path.relative_to(REPO)}:{n}", "not a JSON object")
                continue
            yield n, row


def check_rows(
    path: Path,
    keys: set[str],
    optional: frozenset[str] = frozenset(),
    lang: str | None = None,
    extra: Callable[[str, dict], None] | None = None,
) -> list[dict]:
    """The rows of `path`, each checked for its keys, types, language and duplicates."""
    rows: list[dict] = []
    ids: Counter[str] = Counter()
    texts: dict[str, str] = {}
    rel = path.relative_to(REPO)
    for n, row in read_jsonl(path):
        where = f"{rel}:{n}"
        missing, unknown = keys - row.keys(), row.keys() - keys - optional
        if missing or unknown:
            problem(where, f"keys: missing {sorted(missing)}, unexpected {sorted(unknown)}")
            continue
        if not all(isinstance(row[k], str) and row[k].strip() for k in keys - {"relevant"}):
            problem(where, "every field but relevant must be a non-empty string")
            continue
        if row["query"] != row["query"].strip():
            problem(where, "query has leading or trailing white space")
        if lang and row["lang"] != lang:
            problem(where, f"lang {row['lang']!r}, file is {lang!r}")
        why = looks_like(row["lang"], row["query"])
        if why:
            problem(where, why)
        ids[row["id"]] += 1
        key = norm(row["query"])
        if key in texts:
            problem(where, f"same query as id {texts[key]}: {row['query'][:60]!r}")
        texts.setdefault(key, row["id"])
        if extra:
            extra(where, row)
        rows.append(row)
    for i, k in ids.items():
        if k > 1:
            problem(str(rel), f"id {i} appears {k} times")
    return rows


def check_relevant_list(where: str, row: dict) -> list[str]:
    rel = row["relevant"]
    if not (isinstance(rel, list) and rel and all(isinstance(r, str) and r for r in rel)):
        problem(where, "relevant must be a non-empty list of strings")
        return []
    if len(set(rel)) != len(rel):
        problem(where, "relevant lists an item twice")
    return rel


# --- the shared BEIR data ------------------------------------------------------------------


def load_beir(base: Path) -> tuple[set[str], dict[str, str], dict[str, set[str]]]:
    corpus = set()
    for line in open(base / "corpus.jsonl", encoding="utf-8"):
        corpus.add(str(json.loads(line)["_id"]))
    queries = {}
    for line in open(base / "queries.jsonl", encoding="utf-8"):
        q = json.loads(line)
        queries[str(q["_id"])] = q["text"]
    qrels: dict[str, set[str]] = defaultdict(set)
    with open(base / "qrels" / "test.tsv", encoding="utf-8") as f:
        for i, line in enumerate(f):
            parts = line.rstrip("\n").split("\t")
            if i == 0 and not parts[-1].isdigit():
                continue
            if int(parts[2]) > 0:
                qrels[parts[0]].add(parts[1])
    return corpus, queries, qrels


def check_translated(name: str, lang: str, data: Path, per_doc: int | None, least: int) -> str:
    base = data / {"cmrc_en": "cmrc2018_dev", "scifact_zh": "scifact"}[name]
    if not base.is_dir():
        problem(name, f"shared data not found at {base} (pass --data)")
        return f"{name}: not checked"
    corpus, queries, qrels = load_beir(base)
    docs: Counter[str] = Counter()

    def extra(where: str, row: dict) -> None:
        rel = check_relevant_list(where, row)
        qid = row["id"]
        if qid not in queries:
            problem(where, f"id {qid} is not a query in {base.name}")
            return
        if qid not in qrels:
            problem(where, f"id {qid} has no qrels in {base.name}")
        for d in rel:
            if d not in corpus:
                problem(where, f"relevant {d} is not in {base.name}/corpus.jsonl")
            docs[d] += 1
        if set(rel) != qrels.get(qid, set()):
            problem(
                where, f"relevant {sorted(rel)} differs from qrels {sorted(qrels.get(qid, []))}"
            )
        if norm(row["query"]) == norm(queries[qid]):
            problem(where, "query is the untranslated original")

    path = HERE / name / "questions.jsonl"
    rows = check_rows(path, {"id", "lang", "query", "relevant"}, lang=lang, extra=extra)
    if len(rows) < least:
        problem(name, f"{len(rows)} questions, want at least {least}")
    if per_doc:
        for d, k in docs.items():
            if k > per_doc:
                problem(name, f"paragraph {d} has {k} questions, at most {per_doc} wanted")
    check_readme(name)
    return f"{name}: {len(rows)} questions on {len(docs)} documents"


UNANSWERABLE = {"coding_en": 150, "coding_zh": 150, "general_en": 80, "general_zh": 80}


def existing_prompts() -> dict[str, str]:
    """The prompts already in bench/prompts/ (normalised -> file), which these must not repeat."""
    seen: dict[str, str] = {}
    for path in sorted(PROMPTS.glob("*.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                seen.setdefault(norm(line), path.name)
    return seen


def check_unanswerable(seen: dict[str, str]) -> str:
    """Prompts no vault answers: exact counts, one language a file, kinds `<file group>/<kind>`,
    no repeats across the files or of bench/prompts/."""
    counts = []
    ids: dict[str, str] = {}
    for name, want in UNANSWERABLE.items():
        group, lang = name.split("_")
        path = HERE / "unanswerable" / f"{name}.jsonl"

        def extra(where: str, row: dict, group: str = group, name: str = name) -> None:
            kind = row["kind"]
            if not re.fullmatch(rf"{group}/[a-z-]+", kind):
                problem(where, f"kind {kind!r} is not {group}/<kind>")
            if row["id"] in ids and ids[row["id"]] != name:
                problem(where, f"id {row['id']} also in {ids[row['id']]}")
            ids[row["id"]] = name
            key = norm(row["query"])
            if key in seen:
                problem(where, f"repeats {seen[key]}: {row['query'][:60]!r}")
            seen[key] = f"unanswerable/{name}.jsonl"

        rows = check_rows(path, {"id", "lang", "query", "kind"}, lang=lang, extra=extra)
        if len(rows) != want:
            problem(f"unanswerable/{name}.jsonl", f"{len(rows)} prompts, want {want}")
        kinds = Counter(r["kind"] for r in rows)
        counts.append(f"{name} {len(rows)} ({len(kinds)} kinds)")
    check_readme("unanswerable")
    return "unanswerable: " + ", ".join(counts)


KB = HERE / "personal_kb"
WIKI_LINK = re.compile(r"\[\[([^\]|#]+)(?:#[^\]|]*)?(?:\|[^\]]*)?\]\]")
FLOW_LIST = re.compile(r"\[(.*)\]")


def front_matter(text: str) -> dict[str, str] | None:
    """The `key: value` lines of a note's leading --- block, or None if it has none."""
    if not text.startswith("---\n"):
        return None
    end = text.find("\n---\n", 4)
    if end < 0:
        return None
    fields = {}
    for line in text[4:end].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def han_share(text: str) -> float:
    """Han characters among the letters of a note's prose (code blocks and spans left out)."""
    text = re.sub(r"`[^`]*`", "", re.sub(r"```.*?```", "", text, flags=re.S))
    han, latin = len(CJK.findall(text)), len(LATIN.findall(text))
    return han / (han + latin) if han + latin else 0.0


def check_vault() -> tuple[dict[str, str], dict[str, str], str]:
    """The vault's notes (path -> text) and languages (path -> en|zh), and a summary line.

    Every note: 300-4,000 characters, front matter with a non-empty `tags` list, an `aliases`
    list and `lang` (en or zh) that its script agrees with (Han share of the prose under 10 %
    for English, over 40 % for Chinese); every [[wiki link]] names an existing note; file
    stems are unique (Obsidian links by stem)."""
    vault = KB / "vault"
    notes: dict[str, str] = {}
    langs: dict[str, str] = {}
    stems: dict[str, str] = {}
    for path in sorted(vault.rglob("*")):
        rel = path.relative_to(vault).as_posix()
        where = f"personal_kb/vault/{rel}"
        if path.is_symlink() or not path.is_file():
            if path.is_symlink():
                problem(where, "symlink")
            continue
        if path.suffix != ".md":
            problem(where, "not a Markdown note")
            continue
        text = path.read_text(encoding="utf-8")
        notes[rel] = text
        if not 300 <= len(text) <= 4000:
            problem(where, f"{len(text)} characters, want 300-4,000")
        stem = path.name[: -len(".md")]
        if stem in stems:
            problem(where, f"same file name as {stems[stem]}: [[{stem}]] would be ambiguous")
        stems[stem] = rel
        fm = front_matter(text)
        if fm is None:
            problem(where, "no front matter")
            continue
        for key in ("tags", "aliases"):
            m = FLOW_LIST.fullmatch(fm.get(key, ""))
            if not m:
                problem(where, f"front matter {key} is not a [list]")
            elif key == "tags" and not m.group(1).strip():
                problem(where, "no tags")
        lang = fm.get("lang", "")
        if lang not in ("en", "zh"):
            problem(where, f"front matter lang {lang!r}, want en or zh")
            continue
        langs[rel] = lang
        share = han_share(text)
        if (lang == "en" and share >= 0.1) or (lang == "zh" and share <= 0.4):
            problem(where, f"lang {lang} but Han characters are {share:.0%} of the letters")
    for rel, text in notes.items():
        for target in WIKI_LINK.findall(text):
            if target.strip() not in stems:
                problem(f"personal_kb/vault/{rel}", f"[[{target}]] names no note")
    english = sum(1 for lang in langs.values() if lang == "en")
    if not 0.55 <= english / max(len(langs), 1) <= 0.65:
        problem("personal_kb/vault", f"{english} of {len(langs)} notes in English, want 55-65 %")
    both = [s for s in stems if s.endswith((".zh", ".en")) and s[:-3] in stems]
    if len(both) < 5:
        problem("personal_kb/vault", f"{len(both)} notes exist in both languages, want 5 or more")
    if len(notes) < 75:
        problem("personal_kb/vault", f"{len(notes)} notes, want about 80")
    line = f"{len(notes)} notes ({english} en, {len(langs) - english} zh, {len(both)} in both)"
    return notes, langs, line


def check_personal_kb(seen: dict[str, str]) -> str:
    """The vault, its questions (relevant paths exist, kind agrees with the notes' languages,
    a rare word occurs in exactly one note and that note is relevant) and its null set."""
    notes, langs, summary = check_vault()
    folded = {rel: text.casefold() for rel, text in notes.items()}
    kinds: Counter[str] = Counter()

    def question(where: str, row: dict) -> None:
        rel = check_relevant_list(where, row)
        missing = [r for r in rel if r not in notes]
        if missing:
            problem(where, f"relevant {missing} not in vault/")
            return
        same = any(langs.get(r) == row["lang"] for r in rel)
        kind = "same-lang" if same else "cross-lang"
        if row["kind"] != kind:
            problem(where, f"kind {row['kind']!r}, the relevant notes' languages make it {kind}")
        kinds[kind] += 1
        if "rare" in row:
            word = row["rare"]
            kinds["rare"] += 1
            if not isinstance(word, str) or word.casefold() not in row["query"].casefold():
                problem(where, f"rare word {word!r} is not in the query")
                return
            holders = [r for r, text in folded.items() if word.casefold() in text]
            if holders != [r for r in rel if r in holders] or len(holders) != 1:
                problem(
                    where, f"rare word {word!r} is in {holders}, want exactly the relevant note"
                )

    rows = check_rows(
        KB / "questions.jsonl",
        {"id", "lang", "query", "relevant", "kind"},
        optional=frozenset({"rare"}),
        extra=question,
    )
    langs_asked = Counter(r["lang"] for r in rows)
    if len(rows) < 150 or min(langs_asked["en"], langs_asked["zh"]) < 50:
        problem("personal_kb/questions.jsonl", f"{len(rows)} questions {dict(langs_asked)}")
    if kinds["cross-lang"] < 35:
        problem("personal_kb/questions.jsonl", f"{kinds['cross-lang']} cross-language, want ~40")
    if kinds["rare"] < 18:
        problem("personal_kb/questions.jsonl", f"{kinds['rare']} rare-word, want ~20")
    asked = {norm(r["query"]) for r in rows}

    def null(where: str, row: dict) -> None:
        if row["kind"] not in ("absent-fact", "absent-topic"):
            problem(where, f"kind {row['kind']!r}, want absent-fact or absent-topic")
        key = norm(row["query"])
        if key in asked:
            problem(where, "also asked in questions.jsonl")
        if key in seen:
            problem(where, f"repeats {seen[key]}")

    nulls = check_rows(KB / "unanswerable.jsonl", {"id", "lang", "query", "kind"}, extra=null)
    null_langs = Counter(r["lang"] for r in nulls)
    if len(nulls) != 50 or min(null_langs["en"], null_langs["zh"]) < 20:
        problem("personal_kb/unanswerable.jsonl", f"{len(nulls)} prompts {dict(null_langs)}")
    check_readme("personal_kb")
    return (
        f"personal_kb: {summary}; {len(rows)} questions ({kinds['same-lang']} same-language,"
        f" {kinds['cross-lang']} cross-language, {kinds['rare']} rare-word); {len(nulls)} unanswerable"
    )


def check_readme(name: str) -> None:
    readme = HERE / name / "README.md"
    if not readme.is_file():
        problem(name, "README.md missing")
    elif "license" not in readme.read_text(encoding="utf-8").casefold():
        problem(name, "README.md says nothing about the license")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1].strip())
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the shared data directory")
    args = ap.parse_args()
    lines = [
        check_translated("cmrc_en", "en", args.data, per_doc=2, least=200),
        check_translated("scifact_zh", "zh", args.data, per_doc=None, least=200),
        check_unanswerable(seen := existing_prompts()),
        check_personal_kb(seen),
    ]
    for line in lines:
        print(line)
    for p in problems:
        print("PROBLEM", p, file=sys.stderr)
    print("ok" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
