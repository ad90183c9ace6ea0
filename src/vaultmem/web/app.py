"""The pages of `vaultmem ui`: each one reads through a library front door and renders a template.

Design decision: a page is a plain function `(Ask) -> Page` run in a worker thread (the
library is synchronous: git, PostgreSQL), with no logic of its own beyond picking what to
show; every figure comes from the function behind the matching command (`status --json`,
`audit list/show/allow/revoke`, `log`, `context --json`, `inbox`). Templates are Jinja2 with
autoescape on, so every note's text, title and path is escaped. A quarantined file is named
on the page by an opaque id (`Secret.ident`) and shown with `mask_path_tokens`, so a token
written into a file name never reaches the page either; its findings come from `audit.show`,
masked by the scanner itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from .. import vaults
from ..config import Settings, load_settings, user_home
from ..dburl import redact_url
from ..errors import ConfirmationRequired, VaultmemError
from ..index.statedir import duration
from .security import Guard, Secret, check_csrf

if TYPE_CHECKING:
    from ..agent.warm import WarmResources

# How many of the latest injections the log page shows, and notes a browse page lists.
LOG_ENTRIES = 500
NOTES_PAGE = 200

_env = Environment(loader=PackageLoader("vaultmem.web", "templates"), autoescape=True)


# A time left, in `vaultmem status`'s words (one function for both).
_env.filters["duration"] = duration


class NotFound(Exception):
    """A vault, file or note the page was asked for that is not there (a 404)."""


@dataclass(frozen=True)
class Page:
    template: str
    context: dict[str, Any] = field(default_factory=dict)
    status: int = 200


@dataclass(frozen=True)
class Ask:
    """One request as a page sees it: its parameters (query or form), the chosen vault."""

    params: Mapping[str, str]
    chosen: vaults.VaultEntry | None  # None: no vault registered yet (the overview says so)
    secret: Secret

    @property
    def vault(self) -> vaults.VaultEntry:
        if self.chosen is None or self.chosen.path is None:
            raise NotFound("no vault is registered: run `vaultmem init` in your vault")
        return self.chosen

    @property
    def root(self) -> Path:
        path = self.vault.path
        assert path is not None  # `vault` admits only vaults with a folder
        return path

    def settings(self) -> Settings:
        return load_settings(self.root, entry=self.vault)

    def reading(self) -> AbstractContextManager[Any]:
        """A connection for a page that only reads: leased from the server's pool (kept open
        between requests, as the warm service keeps them). A change opens its own
        (`db.connect`): an allowance may index and embed for longer than a lease may last."""
        return _warm().connection(self.settings(), start=False, timeout=5)

    def get(self, name: str, default: str = "") -> str:
        return self.params.get(name, default)


@dataclass(frozen=True)
class UI:
    """What the app is started with: the secret and the vault shown first."""

    secret: Secret
    default_vault: str | None = None


def _vault(ui: UI, name: str | None) -> vaults.VaultEntry | None:
    """A registered vault with a folder on this machine: the one named, else the one `ui`
    started with, else the registry's default (None when none is registered). Nothing else
    is ever read: a name that is not such a vault is a 404."""
    config = vaults.load()
    chosen = name or ui.default_vault
    entry = config.get(chosen) if chosen else config.default_vault()
    if entry is None and not chosen:
        entry = next((v for v in config.vaults if v.path is not None), None)
        if entry is None:
            return None
    if entry is None or entry.path is None:
        raise NotFound("no such registered vault with a folder on this machine")
    return entry


def _masked(path: str) -> str:
    from ..index.sensitive import mask_path_tokens

    return mask_path_tokens(path)


# --- pages --------------------------------------------------------------------------------


def overview(ask: Ask) -> Page:
    from ..index.verify import status_report

    report = status_report(load_settings(None))
    rows = [v for v in report.vaults if v.registered]
    cards = []
    for v in rows:
        live = v.embedding_progress or {}
        rate = live.get("rate")
        run = v.last_run or {}
        if not rate and run.get("embedded") and run.get("embed_seconds"):
            rate = run["embedded"] / run["embed_seconds"]
        eta = round(v.backlog / rate) if rate and v.backlog else None
        cards.append({"v": v, "rate": rate, "eta": eta, "run": run})
    return Page(
        "overview.html",
        {"report": report, "cards": cards, "title": "Overview"},
    )


def quarantine(ask: Ask) -> Page:
    from ..index import audit

    with ask.reading() as conn:
        v = audit.require_vault(conn, ask.root)
        quarantined = audit.list_quarantined(conn, v.id)
        allowed = audit.list_allowed(conn, v.id)
    rule, folder, category = ask.get("rule"), ask.get("folder"), ask.get("category")
    shown = [
        q
        for q in quarantined
        if (not rule or rule in q.rule_ids)
        and (not category or q.risk == category)
        and (not folder or q.path.startswith(folder.rstrip("/") + "/"))
    ]
    folders = sorted({q.path.split("/")[0] for q in quarantined if "/" in q.path})
    return Page(
        "quarantine.html",
        {
            "title": "Quarantine",
            "rows": [
                {
                    "id": ask.secret.ident(q.path),
                    "path": _masked(q.path),
                    "risk": q.risk,
                    "rules": q.rule_ids,
                    "lines": [n for n in q.line_numbers if n],
                    "earlier": q.allowed_earlier_version,
                }
                for q in shown
            ],
            "total": len(quarantined),
            "allowed": [
                {
                    "id": ask.secret.ident(a.path),
                    "path": _masked(a.path),
                    "state": a.state,
                    "at": a.allowed_at,
                }
                for a in allowed
            ],
            "rules": sorted({r for q in quarantined for r in q.rule_ids}),
            "categories": sorted({q.risk for q in quarantined}),
            "folders": [_masked(f) for f in folders],
            "filter": {"rule": rule, "folder": folder, "category": category},
        },
    )


def _quarantined_path(ask: Ask, conn: Any, vault_id: int) -> str:
    from ..index import audit

    wanted = ask.get("id")
    for q in audit.list_quarantined(conn, vault_id):
        if ask.secret.ident(q.path) == wanted:
            return q.path
    raise NotFound("that file is not quarantined (any more)")


def quarantine_file(ask: Ask) -> Page:
    from ..index import audit

    settings = ask.settings()
    with ask.reading() as conn:
        v = audit.require_vault(conn, ask.root)
        path = _quarantined_path(ask, conn, v.id)
        detail = audit.show(conn, settings, v, path)
    return Page(
        "quarantine_file.html",
        {
            "title": "Quarantined file",
            "id": ask.get("id"),
            "path": _masked(detail.path),
            "detail": detail,
        },
    )


def allow(ask: Ask) -> Page:
    from ..index import audit
    from ..store import db

    settings = ask.settings()
    with db.connect(settings) as conn:
        v = audit.require_vault(conn, ask.root)
        path = _quarantined_path(ask, conn, v.id)
        try:
            decision = audit.allow(
                conn, v, path, ask.root, settings=settings, yes=ask.get("confirm") == "yes"
            )
        except ConfirmationRequired as exc:
            return Page(
                "confirm.html",
                {
                    "title": "Confirm",
                    "action": "/quarantine/allow",
                    "fields": {"id": ask.get("id")},
                    "question": f"{_masked(path)} holds what looks like a real credential "
                    f"({', '.join(exc.rules)}): indexing makes it searchable and sends it to the "
                    "embedding provider. Index it anyway?",
                },
            )
    return Page(
        "done.html",
        {
            "title": "Allowed",
            "message": f"allowed {_masked(decision.path)} at blob "
            f"{str(decision.blob_sha)[:12]}: {decision.state}",
        },
    )


def allow_rule(ask: Ask) -> Page:
    from ..index import audit
    from ..index.sensitive import HIGH_CONFIDENCE_RULES
    from ..store import db

    rule, pattern = ask.get("rule"), ask.get("glob") or "*"
    if not rule:
        raise VaultmemError("choose a rule to allow")
    settings = ask.settings()
    with db.connect(settings) as conn:
        v = audit.require_vault(conn, ask.root)
        paths, others = audit.rule_release(conn, v, rule, pattern)
        conn.commit()
        confirmed = ask.get("confirm") == "yes" and ask.get("count") == str(len(paths))
        if not confirmed or not paths:
            strong = rule in HIGH_CONFIDENCE_RULES
            return Page(
                "confirm.html",
                {
                    "title": "Confirm",
                    "action": "/quarantine/allow-rule",
                    "fields": {"rule": rule, "glob": pattern, "count": str(len(paths))},
                    "question": f"This releases {len(paths)} file(s) quarantined only by "
                    f"{rule} under {pattern}"
                    + (
                        ": they hold what looks like a real credential, which indexing makes "
                        "searchable and sends to the embedding provider"
                        if strong
                        else ""
                    )
                    + f"; {len(others)} more also hit other rules and stay. Allow them?",
                    "paths": [_masked(p) for p in paths],
                    "nothing": not paths,
                },
            )
        outcome = audit.allow_rule(conn, v, rule, pattern, ask.root, settings=settings, yes=True)
    return Page(
        "done.html",
        {
            "title": "Allowed",
            "message": f"allowed {len(outcome.allowed)} file(s) quarantined only by {rule}",
            "paths": [f"{_masked(d.path)}: {d.state}" for d in outcome.allowed],
        },
    )


def revoke(ask: Ask) -> Page:
    from ..index import audit
    from ..store import db

    settings = ask.settings()
    with db.connect(settings) as conn:
        v = audit.require_vault(conn, ask.root)
        wanted = ask.get("id")
        path = next(
            (a.path for a in audit.list_allowed(conn, v.id) if ask.secret.ident(a.path) == wanted),
            None,
        )
        if path is None:
            raise NotFound("that file was never allowed")
        decision = audit.revoke(conn, v, path, ask.root, settings=settings)
    return Page(
        "done.html",
        {
            "title": "Revoked",
            "message": f"revoked the review of {_masked(decision.path)}: {decision.state}",
        },
    )


def log(ask: Ask) -> Page:
    from ..agent import injections

    everything = ask.get("all") == "1"
    entries = [
        e
        for e in reversed(injections.read(user_home(), LOG_ENTRIES))
        if everything or e.vault in (ask.vault.name, None)
    ]
    # A timeline per session (the hook records Claude Code's session id), newest first; the
    # records without one (the wrapper, MCP, older records) by day.
    sessions: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        forms = {p: "pointer" for p in e.pointers} | {p: "passage" for p in e.passages}
        key = f"session {e.session}" if e.session else f"{e.time[:10]}, no session recorded"
        sessions.setdefault(key, []).append(
            {"e": e, "given": [(p, forms.get(p, "text")) for p in e.paths]}
        )
    return Page(
        "log.html", {"title": "What the agent got", "sessions": sessions, "all": everything}
    )


@cache
def _warm() -> WarmResources:
    """The server's connections and embedders, kept between requests (`warm.WarmResources`)."""
    from ..agent.warm import WarmResources

    return WarmResources()


@cache
def _context_resources() -> Any:
    """What the search box builds a context with: `vaultmem context`'s resources (the second
    opinion judged whenever the vault's model wants it, loaded before the answer), except that
    the connection and the embedder are the server's, kept between requests."""
    from ..agent.context import ColdResources

    class PageResources(ColdResources):
        def connection(self, settings: Settings, *, start: bool, timeout: int) -> Any:
            return _warm().connection(settings, start=start, timeout=timeout)

        def embedder(self, settings: Settings) -> Any:
            return _warm().embedder(settings)

    return PageResources(second_opinion=True)


def context_search(ask: Ask) -> Page:
    from ..agent import context
    from ..search.explain import DROP_REASONS, band_line, explain_line

    prompt = ask.get("q")
    result = None
    explained: list[dict[str, str]] = []
    if prompt.strip():
        settings = ask.settings()
        built = context.build_context(
            settings, prompt, vault_root=ask.root, resources=_context_resources()
        )
        result = built.as_json()
        # `vaultmem query --explain`'s words for every candidate the gate judged.
        for v in built.retrieval.verdicts if built.retrieval is not None else ():
            if v.drop is not None and v.drop.value == "beyond-k":
                continue
            explained.append(
                {
                    "path": v.hit.path,
                    "verdict": "kept" if v.drop is None else DROP_REASONS[v.drop.value],
                    "scores": explain_line(v.hit),
                    "band": band_line(v, settings.gate) if v.calibration is not None else "",
                }
            )
    return Page(
        "context.html",
        {
            "title": "What the agent would get",
            "q": prompt,
            "result": result,
            "explained": explained,
        },
    )


def inbox_page(ask: Ask) -> Page:
    from ..agent import inbox

    items = inbox.inbox(ask.root, user_home())
    diffs = inbox.diffs(ask.root, items)
    return Page(
        "inbox.html",
        {
            "title": "What the agent wrote",
            "items": [{"i": i, "diff": diffs.get(i.commit, "")} for i in items],
            "through": items[0].commit if items else "",
        },
    )


def inbox_done(ask: Ask) -> Page:
    from ..agent import inbox

    seen, marked = inbox.done(ask.root, user_home(), ask.get("through") or None)
    return Page(
        "done.html",
        {"title": "Inbox", "message": f"marked seen through {seen.head[:12]} ({marked} note(s))"},
    )


def inbox_revert(ask: Ask) -> Page:
    from ..agent import inbox
    from ..index.hook_run import run_from_git_hook

    written = inbox.revert(ask.root, user_home(), ask.get("commit"), ask.get("path"))
    # commit-tree + update-ref run no hooks: the same catch-up the post-commit hook starts.
    run_from_git_hook(str(ask.root), None)
    what = "removed" if not written.blob else "restored to its version before the agent's write"
    return Page(
        "done.html",
        {
            "title": "Reverted",
            "message": f"{written.path} {what} (commit {written.commit[:12]})",
        },
    )


def notes(ask: Ask) -> Page:
    from .. import store
    from ..index import audit

    prefix = ask.get("prefix")
    try:
        offset = max(0, int(ask.get("offset") or 0))
    except ValueError:
        offset = 0
    with ask.reading() as conn:
        v = audit.require_vault(conn, ask.root)
        rows = store.note_rows(conn, v.id, prefix, limit=NOTES_PAGE + 1, offset=offset)
        conn.commit()
    return Page(
        "notes.html",
        {
            "title": "Notes",
            "rows": rows[:NOTES_PAGE],
            "prefix": prefix,
            "offset": offset,
            "more": len(rows) > NOTES_PAGE,
            "page": NOTES_PAGE,
        },
    )


def note(ask: Ask) -> Page:
    from .. import store
    from ..index import audit

    path = ask.get("path")
    with ask.reading() as conn:
        v = audit.require_vault(conn, ask.root)
        held = store.indexed_note(conn, v.id, path)
        chunks = store.note_chunks(conn, v.id, path)
        title = store.note_titles(conn, v.id, [path]).get(path, "")
        blob = store.indexed_blobs(conn, v.id, [path]).get(path)
        conn.commit()
    if held is None:
        raise NotFound("no indexed note at that path in this vault")
    return Page(
        "note.html",
        {
            "title": title or path,
            "path": path,
            "commit": held.commit_sha,
            "blob": blob,
            "chunks": chunks,
        },
    )


# --- the app ------------------------------------------------------------------------------


def _render(ui: UI, page: Page, vault: vaults.VaultEntry | None) -> HTMLResponse:
    names = [v.name for v in vaults.load().vaults if v.path is not None]
    html = _env.get_template(page.template).render(
        **page.context,
        csrf=ui.secret.csrf,
        vault=vault.name if vault is not None else "",
        vault_names=names,
        now=datetime.now().astimezone(),
    )
    return HTMLResponse(html, status_code=page.status)


def _error(ui: UI, status: int, message: str) -> HTMLResponse:
    return _render(ui, Page("error.html", {"title": "Error", "message": message}, status), None)


def _endpoint(ui: UI, fn: Callable[[Ask], Page], change: bool = False) -> Any:
    async def endpoint(request: Request) -> Response:
        params: dict[str, str] = dict(request.query_params)
        if change:
            form = await request.form()
            params = {k: v for k, v in form.items() if isinstance(v, str)}
            if not check_csrf(ui.secret, params.get("csrf")):
                return _error(ui, 403, "the form's CSRF field is missing or wrong: reload the page")
        try:
            vault = _vault(ui, params.get("vault") or None)
            page = await run_in_threadpool(fn, Ask(params, vault, ui.secret))
        except NotFound as exc:
            return _error(ui, 404, str(exc))
        except VaultmemError as exc:
            # An error may name a path: a token written into it is masked, as on every page.
            return _error(ui, 400, _masked(redact_url(str(exc))))
        except Exception as exc:  # the database went away, git failed: say so, keep serving
            import psycopg

            if isinstance(exc, psycopg.OperationalError):
                return _error(ui, 503, "the database is unreachable: `vaultmem db status`")
            raise
        return _render(ui, page, vault)

    return endpoint


async def _style(request: Request) -> Response:
    css = resources.files("vaultmem.web").joinpath("static/style.css").read_text("utf-8")
    return Response(css, media_type="text/css")


async def _favicon(request: Request) -> Response:
    return Response(b"", status_code=204)


def create_app(ui: UI) -> Guard:
    """The ASGI app, behind its guard (`security.Guard`)."""
    pages: list[tuple[str, Callable[[Ask], Page], bool]] = [
        ("/", overview, False),
        ("/quarantine", quarantine, False),
        ("/quarantine/file", quarantine_file, False),
        ("/quarantine/allow", allow, True),
        ("/quarantine/allow-rule", allow_rule, True),
        ("/quarantine/revoke", revoke, True),
        ("/log", log, False),
        ("/context", context_search, False),
        ("/inbox", inbox_page, False),
        ("/inbox/done", inbox_done, True),
        ("/inbox/revert", inbox_revert, True),
        ("/notes", notes, False),
        ("/note", note, False),
    ]
    routes = [
        Route(path, _endpoint(ui, fn, change), methods=["POST"] if change else ["GET", "HEAD"])
        for path, fn, change in pages
    ]
    routes.append(Route("/static/style.css", _style))
    routes.append(Route("/favicon.ico", _favicon))
    app = Starlette(routes=routes)
    return Guard(app, ui.secret)
