"""A dev corpus of long notes no calibration has seen: meeting logs of 3-8 KB (several speakers,
one line a turn), each holding a few decisions that one line states, with a question per
decision (English, and Chinese for the cross-language set) and questions none of them answers.

Generated from a fixed seed, so every run builds the same vault; nothing here is copied from a
data set. The notes are long on purpose: the line that answers is a small part of a note whose
other lines talk about everything else (what `agent.delivery`'s passages are for).
"""

from __future__ import annotations

import random

import _devset

SPEAKERS = ("Priya", "Tomas", "Aiko", "Rahul", "Mei", "Jonas", "Fatima", "Luca")
PROJECTS = (
    "quokkaflint",
    "marblewren",
    "tidepost",
    "ashgrove",
    "copperkite",
    "fernvault",
    "lumenrail",
    "saltmarsh",
    "glasswing",
    "oakbridge",
    "brightfern",
    "duskline",
    "emberhill",
    "frostgate",
    "ironleaf",
    "jadecrest",
    "kelpstone",
    "larchway",
    "mossbank",
    "nightjar",
)
# (decision line template, English question, Chinese question)
DECISIONS = (
    (
        "agreed, the {p} canary deploy runs at {h}:30 UTC every {d} from now on",
        "when does the {p} canary deploy run?",
        "{p} 的金丝雀部署什么时候运行？",
    ),
    (
        "the {p} on-call rotation moves to {n}-day shifts starting next month",
        "how long are the {p} on-call shifts going to be?",
        "{p} 的值班轮换每班多少天？",
    ),
    (
        "we keep {p} logs for {n} days and then they go to cold storage",
        "how many days do we keep {p} logs?",
        "{p} 的日志保留多少天？",
    ),
    (
        "the {p} load test target is {n}00 requests per second at p99 under 80 ms",
        "what is the load test target for {p}?",
        "{p} 的压测目标是多少？",
    ),
    (
        "{p} release freeze starts on {d} and lasts until the audit is done",
        "when does the {p} release freeze start?",
        "{p} 的发布冻结从哪天开始？",
    ),
    (
        "the {p} database migration will use the blue green switch, not an in place upgrade",
        "how are we doing the {p} database migration?",
        "{p} 的数据库迁移用什么方式？",
    ),
)
FILLER = (
    "the sprint board is behind because the design review slipped a week",
    "the onboarding guide still points at the old wiki page for laptops",
    "customer interviews this month mostly asked about offline mode",
    "the office move needs a list of who sits near the windows",
    "hiring for the data role paused until the budget is signed",
    "the quarterly planning doc needs owners for every goal",
    "lunch orders should go through the shared sheet again",
    "the retro found that standups run long on Mondays",
    "we should write down how the expense tool handles travel",
    "the slides for the all hands are due on Thursday",
    "nobody has looked at the flaky calendar integration yet",
    "the accessibility review flagged contrast on two pages",
    "the vendor contract renewal is waiting on legal",
    "someone should clean up the old feature flags",
    "the intern projects need a demo slot",
    "the support queue doubled after the pricing email",
)
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
UNANSWERABLE = (
    "add type hints to this function",
    "why does this regex not match newlines?",
    "write a unit test for the parser",
    "rename the variable to something clearer",
    "what is the capital of Australia?",
    "how do I reverse a list in python",
    "给这个函数加上类型注解",
    "这个正则表达式为什么匹配不到换行？",
)


def meetings(notes: int = 40, seed: int = 41) -> _devset.DevCorpus:
    rng = random.Random(seed)
    # Each (project, decision) once in the vault: a question has one note that answers it.
    pairs = rng.sample([(p, d) for p in PROJECTS for d in range(len(DECISIONS))], notes * 2)
    files: dict[str, str] = {}
    prompts: list[_devset.Prompt] = []
    for n in range(notes):
        people = rng.sample(SPEAKERS, rng.randint(3, 5))
        title = (
            f"Weekly sync of the platform, product and support teams, {2026}-"
            f"{1 + n % 12:02d}-{1 + n % 27:02d} (notes taken by {people[0]})"
        )
        lines = [f"# {title}", "", f"Attendees: {', '.join(people)}", ""]
        size = rng.randint(3000, 7800)
        projects = [pairs[2 * n][0], pairs[2 * n + 1][0]]
        decisions = [pairs[2 * n][1], pairs[2 * n + 1][1]]
        slots = sorted(rng.sample(range(8, 40), 2))
        turn = 0
        path = f"meetings/{2026}-{1 + n % 12:02d}-{n:02d}-sync.md"
        while sum(len(x) + 1 for x in lines) < size or turn <= slots[-1]:
            who = people[turn % len(people)]
            if turn in slots:
                j = slots.index(turn)
                line_t, q_en, q_zh = DECISIONS[decisions[j]]
                values = dict(
                    p=projects[j], h=rng.randint(1, 9), d=rng.choice(DAYS), n=rng.randint(3, 9)
                )
                lines.append(f"{who}: {line_t.format(**values)}.")
                rel = frozenset({path})
                prompts.append(_devset.Prompt(q_en.format(**values), rel, "same", "en"))
                prompts.append(_devset.Prompt(q_zh.format(**values), rel, "cross", "zh"))
            else:
                lines.append(f"{who}: on item {turn}, {rng.choice(FILLER)}.")
            turn += 1
            if turn % 12 == 0:
                lines += ["", f"## Part {turn // 12 + 1}", ""]
        files[path] = "\n".join(lines) + "\n"
    for text in UNANSWERABLE:
        lang = "zh" if not text.isascii() else "en"
        prompts.append(_devset.Prompt(text, frozenset(), f"coding {lang}", lang))
    return _devset.DevCorpus("meetings", files, prompts)
