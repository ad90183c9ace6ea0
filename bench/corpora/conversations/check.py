"""Check the conversations corpus: notes, questions and unanswerable prompts agree.

Run from anywhere: `python3 bench/corpora/conversations/check.py`. Exit code 0 when every check
passes, 1 otherwise (each failure printed on one line). Standard library only; if vaultmem is
importable, every note is also run through its front-matter parser and sensitive-content policy,
so no note would be quarantined or indexed with a warning.

What is checked:
- notes: path `vault/<conversation>/<YYYY-MM-DD>-session-<n>.md`, 1,500-5,000 characters, valid
  UTF-8, a `date:` in the front matter equal to the file name's, the date in the body too;
- questions.jsonl: fields, unique ids, known kind and lang, every relevant path exists; every
  `evidence` string occurs (case-insensitive, whitespace folded) in at least one relevant note's
  body (front matter excluded: it is not indexed as text), and every relevant note holds at least
  one of them; for `rare-word` questions, `evidence[0]` occurs (as a whole word, in Latin script) in exactly
  one note of the vault;
- unanswerable.jsonl: fields, unique ids, and no `absent` string occurs anywhere in the vault
  (as a whole word, in Latin script);
- the whole corpus stays under 1.2 MB.

`--audit` also prints, for review, notes outside a question's `relevant` list that hold every
one of its evidence strings.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
VAULT = HERE / "vault"
KINDS = {"single-hop", "multi-hop", "temporal", "rare-word", "open"}
LANGS = {"en", "zh"}
NAME_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})-session-(\d+)\.md$")
MIN_CHARS, MAX_CHARS = 1500, 5000
MAX_BYTES = 1_200_000
# --audit: also list notes outside `relevant` that hold every evidence string (candidates the
# relevant list may have missed); printed for review, never a failure.
AUDIT = "--audit" in sys.argv[1:]

failures: list[str] = []


def fail(msg: str) -> None:
    failures.append(msg)


def fold(text: str) -> str:
    return re.sub(r"\s+", " ", text).casefold()


def word_pattern(term: str) -> re.Pattern[str]:
    """`term` as a whole word where it starts or ends with a letter or digit (so "jin" does not
    match "Beijing"); CJK text has no word boundaries, so there it is a plain substring."""
    pattern = re.escape(fold(term))
    if re.match(r"[0-9a-z]", pattern, re.ASCII):
        pattern = r"(?<![0-9a-z])" + pattern
    if re.search(r"[0-9a-z]$", pattern, re.ASCII):
        pattern += r"(?![0-9a-z])"
    return re.compile(pattern)


def body_of(text: str) -> tuple[str, str]:
    """(front matter block, body) for a note that starts with '---'."""
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            return text[4:end], text[end + 5 :]
    return "", text


def load_notes() -> dict[str, str]:
    notes: dict[str, str] = {}
    for path in sorted(VAULT.rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(VAULT).as_posix()
        parts = rel.split("/")
        if len(parts) != 2 or not NAME_RE.match(parts[1]):
            fail(f"{rel}: not vault/<conversation>/<YYYY-MM-DD>-session-<n>.md")
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            fail(f"{rel}: not valid UTF-8")
            continue
        n = len(text)
        if not MIN_CHARS <= n <= MAX_CHARS:
            fail(f"{rel}: {n} characters, outside {MIN_CHARS}-{MAX_CHARS}")
        fm, body = body_of(text)
        date = NAME_RE.match(parts[1])[1]  # type: ignore[index]
        m = re.search(r"^date:\s*(\S+)\s*$", fm, re.M)
        if not m or m[1] != date:
            fail(f"{rel}: front matter date does not match the file name")
        notes[rel] = body
    return notes


def check_sessions(notes: dict[str, str]) -> None:
    by_conv: dict[str, list[int]] = {}
    for rel in notes:
        conv, name = rel.split("/")
        by_conv.setdefault(conv, []).append(int(NAME_RE.match(name)[2]))  # type: ignore[index]
    for conv, nums in by_conv.items():
        if sorted(nums) != list(range(1, len(nums) + 1)):
            fail(f"{conv}: sessions are not numbered 1..{len(nums)}")
        dated = sorted(r for r in notes if r.startswith(conv + "/"))
        order = [int(NAME_RE.match(r.split("/")[1])[2]) for r in dated]  # type: ignore[index]
        if order != sorted(order):
            fail(f"{conv}: session numbers do not follow the dates")


def read_jsonl(name: str) -> list[dict]:
    rows = []
    for i, line in enumerate((HERE / name).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as exc:
            fail(f"{name}:{i}: not JSON ({exc})")
    return rows


def check_questions(notes: dict[str, str]) -> list[dict]:
    folded = {rel: fold(body) for rel, body in notes.items()}
    rows = read_jsonl("questions.jsonl")
    ids = Counter(r.get("id") for r in rows)
    for qid, n in ids.items():
        if n > 1:
            fail(f"questions: id {qid} used {n} times")
    for r in rows:
        qid = r.get("id", "?")
        if not re.fullmatch(r"conv-q\d{4}", str(qid)):
            fail(f"{qid}: id is not conv-qNNNN")
        if r.get("kind") not in KINDS:
            fail(f"{qid}: kind {r.get('kind')!r}")
        if r.get("lang") not in LANGS:
            fail(f"{qid}: lang {r.get('lang')!r}")
        if not str(r.get("query", "")).strip():
            fail(f"{qid}: empty query")
        rel_paths = r.get("relevant") or []
        evidence = r.get("evidence") or []
        if not rel_paths:
            fail(f"{qid}: no relevant notes")
        if not evidence:
            fail(f"{qid}: no evidence strings")
        missing = [p for p in rel_paths if p not in notes]
        for p in missing:
            fail(f"{qid}: relevant {p} does not exist")
        present = [p for p in rel_paths if p in notes]
        if r.get("kind") == "multi-hop" and len(set(present)) < 2:
            fail(f"{qid}: multi-hop with fewer than two notes")
        for ev in evidence:
            if not any(fold(ev) in folded[p] for p in present):
                fail(f"{qid}: evidence {ev!r} is in none of its relevant notes")
        for p in present:
            if not any(fold(ev) in folded[p] for ev in evidence):
                fail(f"{qid}: relevant {p} holds none of the evidence")
        if AUDIT and evidence and present:
            others = [
                p
                for p, body in folded.items()
                if p not in present and all(word_pattern(ev).search(body) for ev in evidence)
            ]
            if others:
                print(f"AUDIT {qid}: all evidence also in {others} ({r.get('query')})")
        if r.get("kind") == "rare-word" and evidence:
            word = word_pattern(evidence[0])
            holders = [p for p, body in folded.items() if word.search(body)]
            if holders != present:
                fail(f"{qid}: rare word {evidence[0]!r} is in {len(holders)} notes: {holders[:4]}")
    return rows


def check_unanswerable(notes: dict[str, str]) -> list[dict]:
    everything = fold("\n".join(notes.values()))
    rows = read_jsonl("unanswerable.jsonl")
    ids = Counter(r.get("id") for r in rows)
    for uid, n in ids.items():
        if n > 1:
            fail(f"unanswerable: id {uid} used {n} times")
    for r in rows:
        uid = r.get("id", "?")
        if not re.fullmatch(r"conv-u\d{4}", str(uid)):
            fail(f"{uid}: id is not conv-uNNNN")
        if r.get("lang") not in LANGS:
            fail(f"{uid}: lang {r.get('lang')!r}")
        if "relevant" in r:
            fail(f"{uid}: an unanswerable prompt has relevant notes")
        if r.get("about") not in (None, "known-person", "unknown-person"):
            fail(f"{uid}: about {r.get('about')!r}")
        if not r.get("absent"):
            fail(f"{uid}: no absent strings")
        for term in r.get("absent") or []:
            if word_pattern(term).search(everything):
                fail(f"{uid}: {term!r} does occur in the vault")
    return rows


def check_with_vaultmem() -> str:
    """Parse and scan every note as vaultmem would, when vaultmem can be imported."""
    src = HERE.parents[2] / "src"
    if src.is_dir() and str(src) not in sys.path:
        sys.path.append(str(src))
    try:
        from vaultmem.index.markdown import parse_note
        from vaultmem.index.sensitive import SensitivePolicy
    except ImportError:  # its dependencies are not installed in this interpreter
        return "vaultmem not importable: parser and sensitive-content checks skipped"
    policy = SensitivePolicy()
    for path in sorted(VAULT.rglob("*.md")):
        rel = path.relative_to(VAULT).as_posix()
        text = path.read_text(encoding="utf-8")
        note = parse_note(rel, text)
        for w in note.warnings:
            fail(f"{rel}: vaultmem warns: {w}")
        for f in policy.scan(rel, text, note.front_matter, note.tags):
            fail(f"{rel}: vaultmem would quarantine it ({f.category})")
    return "vaultmem parser and sensitive-content policy: checked"


def main() -> int:
    notes = load_notes()
    check_sessions(notes)
    questions = check_questions(notes)
    unanswerable = check_unanswerable(notes)
    vm = check_with_vaultmem()
    size = sum(p.stat().st_size for p in HERE.rglob("*") if p.is_file())
    if size > MAX_BYTES:
        fail(f"corpus is {size:,} bytes, over {MAX_BYTES:,}")
    for msg in failures:
        print("FAIL", msg)
    convs = {rel.split("/")[0] for rel in notes}
    chars = sum(len(b) for b in notes.values())
    kinds = Counter((q.get("kind"), q.get("lang")) for q in questions)
    print(
        f"{len(convs)} conversations, {len(notes)} notes, {chars:,} body characters, "
        f"{size:,} bytes on disk"
    )
    print(
        f"{len(questions)} questions: "
        + ", ".join(f"{k}/{lang} {n}" for (k, lang), n in sorted(kinds.items()))
    )
    print(
        f"{len(unanswerable)} unanswerable: "
        + ", ".join(
            f"{lang} {n}"
            for lang, n in sorted(Counter(u.get("lang") for u in unanswerable).items())
        )
    )
    print(vm)
    print("OK" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
