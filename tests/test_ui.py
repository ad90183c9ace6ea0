"""`vaultmem ui` (issue 45): the pages in a real headless Chromium against a real database and
real git vaults, and the guard against every request that is not this machine's own page:
no token, a foreign Host (DNS rebinding), a cross-origin POST, a POST without its CSRF field,
a note that holds script, a path outside the vault. No page ever holds a quarantined secret.

Screenshots of each page at 1280x800 go to the test's temporary folder (`shots/`).
"""

from __future__ import annotations

import http.client
import os
import random
import signal
import string
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import uvicorn
from support.browser import Browser, chromium
from support.fake_secrets import fake_aws, fake_password
from support.indexing import index

from vaultmem import vaults
from vaultmem.agent import injections
from vaultmem.agent.write import remember
from vaultmem.config import load_settings, user_home
from vaultmem.index import audit
from vaultmem.index.verify import status_report
from vaultmem.search import Mode, search
from vaultmem.store import db
from vaultmem.web import UI, Secret, bind, create_app

AWS_ID, AWS_SECRET = fake_aws(random.Random(45))
PASSWORDS = [fake_password(random.Random(450 + i)) for i in range(3)]
CLEAN = "# Deploy\n\nThe service runs on three nodes behind the load balancer.\n"
WITH_KEY = (
    CLEAN + f"\n```ini\naws_access_key_id = {AWS_ID}\naws_secret_access_key = {AWS_SECRET}\n```\n"
)
XSS_TITLE = '<script>alert("t")</script>'
XSS_NOTE = (
    f"---\ntitle: '{XSS_TITLE}'\n---\n# Evil <img src=x onerror=alert(1)>\n\n"
    '<script>document.title=\'owned\'</script>\n<a href="javascript:alert(2)" onclick="alert(3)">x</a>\n'
)
SECRETS = [AWS_ID, AWS_SECRET, *PASSWORDS]


@dataclass
class Server:
    secret: Secret
    port: int

    def url(self, where: str = "/", **query: str) -> str:
        q = urlencode(query)
        return f"http://127.0.0.1:{self.port}{where}" + (f"?{q}" if q else "")

    def request(
        self,
        method: str,
        path: str,
        *,
        host: str | None = None,
        token: str | None = "cookie",
        origin: str | None = "own",
        form: dict[str, str] | None = None,
    ) -> tuple[int, str, dict[str, str]]:
        """One raw HTTP request (no redirects followed): status, body, headers."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Host": host or f"127.0.0.1:{self.port}"}
        if token == "cookie":
            headers["Cookie"] = f"{self.secret.cookie}={self.secret.token}"
        elif token is not None:
            headers["Cookie"] = f"{self.secret.cookie}={token}"
        body = None
        if method == "POST":
            if origin == "own":
                headers["Origin"] = f"http://127.0.0.1:{self.port}"
            elif origin is not None:
                headers["Origin"] = origin
            body = urlencode(form or {})
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        out = r.read().decode("utf-8", "replace"), {k.lower(): v for k, v in r.getheaders()}
        c.close()
        return r.status, *out


@pytest.fixture
def server() -> Iterator[Server]:
    """The app on a free port of 127.0.0.1, in a thread of this process (so it sees this
    test's environment); stopped when the test ends, failure or not."""
    sock = bind(0)
    secret = Secret(sock.getsockname()[1])
    config = uvicorn.Config(
        create_app(UI(secret)), log_level="warning", access_log=False, lifespan="off"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not srv.started and thread.is_alive():
            threading.Event().wait(0.05)
        yield Server(secret, secret.port)
    finally:
        srv.should_exit = True
        thread.join(60)
        sock.close()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    """Debian's headless Chromium, ended when the test ends. Installed by .ci/run; a machine
    without it skips these tests with the reason."""
    binary = chromium()
    if binary is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; .ci/run does)")
    profile = tmp_path / "chromium-profile"
    profile.mkdir()
    with Browser(binary, profile) as b:
        yield b


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    out = tmp_path / "shots"
    out.mkdir()
    return out


@pytest.fixture
def reviewed_vault(conn, vault):
    """A registered, indexed vault with clean notes, quarantined files (a vendor token, three
    passwords under ops/) and a note whose title and body hold script."""
    vault.write("deploy.md", CLEAN)
    vault.write("notes/cache.md", "# Cache\n\nRedis keeps the sessions for an hour.\n")
    vault.write("keys/aws.md", WITH_KEY)
    for i, pw in enumerate(PASSWORDS):
        vault.write(f"ops/router-{i}.md", f"# Router {i}\n\npassword = {pw}\n")
    vault.write("evil.md", XSS_NOTE)
    vault.commit("notes")
    vaults.register(vault.root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
    index(vault.root)
    return vault


def open_page(server: Server, browser: Browser, where: str, **query: str) -> str:
    return browser.go(server.url(where, token=server.secret.token, **query))


def no_secret(*pages: str) -> None:
    for page in pages:
        for s in SECRETS:
            assert s not in page


# --- the guard ----------------------------------------------------------------------------


def test_every_request_needs_the_token(server, reviewed_vault) -> None:
    for path in ("/", "/quarantine", "/note?path=deploy.md", "/static/style.css"):
        status, body, _ = server.request("GET", path, token=None)
        assert status == 403 and "token" in body
        status, _, _ = server.request("GET", path, token="not-the-token")
        assert status == 403
    status, _, _ = server.request("GET", "/?token=wrong", token=None)
    assert status == 403
    # The right token once: a cookie, and the token leaves the address.
    status, _, headers = server.request("GET", f"/?token={server.secret.token}", token=None)
    assert status == 303 and headers["location"] == "/"
    assert "HttpOnly" in headers["set-cookie"] and "SameSite=Strict" in headers["set-cookie"]
    status, body, headers = server.request("GET", "/")
    assert status == 200 and reviewed_vault.root.name in body
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src" not in csp
    assert headers["x-frame-options"] == "DENY"


def test_a_foreign_host_is_refused(server, reviewed_vault) -> None:
    for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1", "0.0.0.0:1"):
        status, _, _ = server.request("GET", "/", host=host)
        assert status == 403, host
    status, _, _ = server.request("GET", "/", host=f"localhost:{server.port}")
    assert status == 200


def test_a_cross_origin_or_forged_post_changes_nothing(server, reviewed_vault, conn) -> None:
    v = db.find_vault(conn, reviewed_vault.root)
    fid = server.secret.ident("ops/router-0.md")
    form = {"csrf": server.secret.csrf, "id": fid, "vault": reviewed_vault.root.name}
    for origin in ("http://evil.example", f"http://evil.example:{server.port}", "null", None):
        status, _, _ = server.request("POST", "/quarantine/allow", origin=origin, form=form)
        assert status == 403, origin
    status, body, _ = server.request("POST", "/quarantine/allow", form={**form, "csrf": "forged"})
    assert status == 403 and "CSRF" in body
    status, _, _ = server.request("POST", "/quarantine/allow", token=None, form=form)
    assert status == 403
    assert len(audit.list_quarantined(conn, v.id)) == 4  # nothing was allowed


def test_paths_outside_the_vault_and_unregistered_vaults_are_not_served(
    server, reviewed_vault, tmp_path
) -> None:
    (tmp_path / "outside.md").write_text("# Outside\n\nnot in any vault\n")
    for path in ("../outside.md", str(tmp_path / "outside.md"), "/etc/passwd", "keys/aws.md"):
        status, body, _ = server.request("GET", "/note?" + urlencode({"path": path}))
        assert status == 404 and "not in any vault" not in body
    status, _, _ = server.request("GET", "/notes?vault=" + str(tmp_path))
    assert status == 404
    status, _, _ = server.request("GET", "/quarantine/file?id=" + "0" * 24)
    assert status == 404


# --- the pages in a real browser -------------------------------------------------------------


def test_overview_shows_the_status_figures(server, browser, reviewed_vault, shots) -> None:
    page = open_page(server, browser, "/")
    assert browser.url() == server.url("/")  # the token left the address bar
    [row] = [
        v for v in status_report(load_settings(None)).vaults if v.root == str(reviewed_vault.root)
    ]
    figures = browser.evaluate(
        "Object.fromEntries([...document.querySelectorAll('section.vault td[class]')]"
        ".map(td => [td.className, td.innerText]))"
    )
    assert figures["notes"] == str(row.notes) == "3"
    assert figures["chunks"] == str(row.chunks)
    assert figures["quarantined"] == str(row.quarantined) == "4"
    assert figures["skipped"] == str(row.skipped)
    assert figures["behind"] == "0"
    no_secret(page)
    browser.screenshot(shots / "overview.png")


def test_quarantine_review_masks_filters_and_allows_one(
    server, browser, reviewed_vault, conn, shots
) -> None:
    page = open_page(server, browser, "/quarantine")
    assert "4 file(s) quarantined" in browser.text()
    browser.screenshot(shots / "quarantine.png")
    filtered = open_page(server, browser, "/quarantine", rule="password-assignment")
    rows = browser.evaluate(
        "[...document.querySelectorAll('tbody tr td:first-child')].map(t => t.innerText)"
    )
    assert sorted(r for r in rows if r.startswith("ops/")) == [
        f"ops/router-{i}.md" for i in range(3)
    ]
    assert "keys/aws.md" not in filtered
    detail = browser.click("tbody tr a")
    assert "password-assignment" in detail and "…" in detail
    browser.screenshot(shots / "quarantine-file.png")
    no_secret(page, filtered, detail)

    # Allowed from the page: indexed at once, so it becomes searchable.
    done = browser.click("form[action='/quarantine/allow'] button")
    assert "allowed ops/router-0.md" in done and ": indexed" in done
    v = db.find_vault(conn, reviewed_vault.root)
    assert [q.path for q in audit.list_quarantined(conn, v.id)] == [
        "keys/aws.md",
        "ops/router-1.md",
        "ops/router-2.md",
    ]
    listed = open_page(server, browser, "/notes")
    assert "ops/router-0.md" in listed
    found = search(conn, v.id, "Router 0", None, mode=Mode.LEXICAL, gated=False)
    assert "ops/router-0.md" in [h.path for h in found]  # searchable
    # ...and it can be revoked from the page again.
    open_page(server, browser, "/quarantine")
    revoked = browser.click("form[action='/quarantine/revoke'] button")
    assert "revoked the review of ops/router-0.md: quarantined" in revoked
    no_secret(done, listed, revoked)


def test_a_vendor_token_asks_before_it_is_allowed(
    server, browser, reviewed_vault, conn, shots
) -> None:
    open_page(server, browser, "/quarantine", rule="aws-access-key")
    asked = browser.click("tbody form[action='/quarantine/allow'] button")
    assert "looks like a real credential" in asked and "aws-access-key" in asked
    browser.screenshot(shots / "confirm-credential.png")
    v = db.find_vault(conn, reviewed_vault.root)
    assert "keys/aws.md" in [q.path for q in audit.list_quarantined(conn, v.id)]
    done = browser.click("#confirm")
    assert "allowed keys/aws.md" in done
    assert "keys/aws.md" not in [q.path for q in audit.list_quarantined(conn, v.id)]
    no_secret(asked)


def test_a_bulk_allow_names_its_count_first(server, browser, reviewed_vault, conn, shots) -> None:
    open_page(server, browser, "/quarantine", rule="password-assignment")
    asked = browser.evaluate(
        "(() => { const f = document.querySelector(\"form[action='/quarantine/allow-rule']\");"
        " f.querySelector('[name=glob]').value = 'ops/*'; return true; })()"
    )
    assert asked
    page = browser.click("form[action='/quarantine/allow-rule'] button")
    assert "This releases 3 file(s) quarantined only by password-assignment under ops/*" in page
    browser.screenshot(shots / "confirm-bulk.png")
    v = db.find_vault(conn, reviewed_vault.root)
    assert len(audit.list_quarantined(conn, v.id)) == 4  # nothing yet
    done = browser.click("#confirm")
    assert "allowed 3 file(s) quarantined only by password-assignment" in done
    assert [q.path for q in audit.list_quarantined(conn, v.id)] == ["keys/aws.md"]


def test_a_stale_bulk_confirmation_asks_again(server, reviewed_vault, conn) -> None:
    form = {
        "csrf": server.secret.csrf,
        "rule": "password-assignment",
        "glob": "ops/*",
        "confirm": "yes",
        "count": "2",  # the person saw 2; there are 3 now
    }
    status, body, _ = server.request("POST", "/quarantine/allow-rule", form=form)
    assert status == 200 and "This releases 3 file(s)" in body
    v = db.find_vault(conn, reviewed_vault.root)
    assert len(audit.list_quarantined(conn, v.id)) == 4


def test_log_shows_a_delivered_passage_and_links_the_note(
    server, browser, reviewed_vault, shots
) -> None:
    name = reviewed_vault.root.name
    injections.append(
        user_home(),
        injections.make(
            injections.CLAUDE_HOOK,
            name,
            "how many nodes run the service",
            ["deploy.md", "notes/cache.md"],
            321,
            keep_prompt=True,
            band="notes",
            passages=["deploy.md"],
            pointers=["notes/cache.md"],
            signals=["deploy.md: 2.10 nats (coverage +1.9, lift +0.8)"],
            session="s-45",
        ),
    )
    page = open_page(server, browser, "/log")
    # Why each note was given: its score and strongest signals, as the hook recorded them.
    assert browser.evaluate("document.querySelector('span.why').innerText") == (
        "deploy.md: 2.10 nats (coverage +1.9, lift +0.8)"
    )
    assert "how many nodes run the service" in browser.text()
    assert browser.evaluate("document.querySelector('main h2').innerText") == "session s-45"
    forms = browser.evaluate(
        "[...document.querySelectorAll('li.injection li')].map(li => li.innerText)"
    )
    assert forms == ["passage deploy.md", "pointer notes/cache.md"]
    browser.screenshot(shots / "log.png")
    note = browser.click("li.injection li a")
    assert "three nodes behind the load balancer" in note
    browser.screenshot(shots / "note.png")
    no_secret(page, note)


def test_the_search_box_shows_what_context_would_deliver(
    server, browser, reviewed_vault, shots
) -> None:
    from vaultmem.agent.context import ColdResources, build_context

    prompt = "how many nodes does the deploy service run behind the load balancer"
    expected = build_context(
        load_settings(reviewed_vault.root),
        prompt,
        vault_root=reviewed_vault.root,
        resources=ColdResources(second_opinion=True),
    ).as_json()
    page = open_page(server, browser, "/context", q=prompt)
    rows = browser.evaluate(
        "[...document.querySelectorAll('table.delivered tbody tr')].map(r => r.innerText)"
    )
    if expected["items"]:
        assert [r.split("\t")[:2] for r in rows] == [
            [i["path"], i["delivery"]] for i in expected["items"]
        ]
    else:
        assert rows == ["no note delivered"]
    assert f"{expected['chars']} characters" in browser.text()
    # ...with `query --explain`'s words for each note the gate judged
    verdicts = browser.evaluate(
        "[...document.querySelectorAll('table.explained tbody tr')]"
        ".map(r => r.cells[0].innerText + ' ' + r.cells[1].innerText)"
    )
    for i in expected["items"]:
        assert f"{i['path']} kept" in verdicts
    assert "gate: note scores" in page
    browser.screenshot(shots / "context.png")
    no_secret(page)


def test_inbox_lists_the_agents_notes_and_marks_them_seen(
    server, browser, reviewed_vault, shots
) -> None:
    (reviewed_vault.root / "deploy.md").write_text(CLEAN + "\nmy own edit, not committed\n")
    before = (reviewed_vault.root / "deploy.md").read_bytes()
    w = remember(reviewed_vault.root, "Flaky <b>test</b> fix", "pin the seed to 7", environ={})
    page = open_page(server, browser, "/inbox")
    assert "Flaky <b>test</b> fix" in browser.text()  # shown as text, never as markup
    assert w.commit[:12] in page and "+pin the seed to 7" in page
    browser.screenshot(shots / "inbox.png")
    done = browser.click("form[action='/inbox/done'] button")
    assert "(1 note(s))" in done
    again = open_page(server, browser, "/inbox")
    assert "Inbox empty" in again
    assert (reviewed_vault.root / "deploy.md").read_bytes() == before


def test_a_note_cannot_run_script_in_the_page(server, browser, reviewed_vault, shots) -> None:
    status, raw, _ = server.request("GET", "/note?path=evil.md")
    assert status == 200
    assert "<script>" not in raw and "&lt;script&gt;" in raw and "<img" not in raw
    for where, query in (("/note", {"path": "evil.md"}), ("/notes", {})):
        open_page(server, browser, where, **query)
        assert (
            browser.evaluate(
                "document.querySelectorAll('script, img, [onerror], [onclick]').length"
            )
            == 0
        )
        assert browser.evaluate("document.title") != "owned"
    assert XSS_TITLE in browser.text()
    browser.screenshot(shots / "notes.png")


def test_inbox_reverts_an_agent_note_and_leaves_the_users_edits(
    server, browser, reviewed_vault, conn
) -> None:
    root = reviewed_vault.root
    edited = CLEAN + "\nmy own edit, not committed\n"
    (root / "deploy.md").write_text(edited)
    (root / "scratch.md").write_text("untracked scratch\n")
    reviewed_vault.git("add", "scratch.md")  # staged, not committed
    before = {p: (root / p).read_bytes() for p in ("deploy.md", "scratch.md")}
    staged = reviewed_vault.git("diff", "--cached", "--name-only")
    w = remember(root, "Wrong guess", "the cache holds a day", environ={})
    open_page(server, browser, "/inbox")
    done = browser.click("form[action='/inbox/revert'] button")
    assert f"{w.path} removed" in done
    assert not (root / w.path).exists()
    assert reviewed_vault.git("log", "-1", "--format=%ae %s").startswith(
        "agent@vaultmem.invalid revert: the agent's agent/wrong-guess.md"
    )
    assert {p: (root / p).read_bytes() for p in before} == before
    assert reviewed_vault.git("diff", "--cached", "--name-only") == staged
    assert "Inbox empty" in open_page(server, browser, "/inbox")


def test_inbox_revert_refuses_a_note_edited_since(server, reviewed_vault) -> None:
    root = reviewed_vault.root
    w = remember(root, "Kept", "first text", environ={})
    note = root / w.path
    note.write_text(note.read_text() + "\nthe user's addition\n")
    reviewed_vault.commit("user edits the agent's note")
    form = {"csrf": server.secret.csrf, "commit": w.commit, "path": w.path}
    status, body, _ = server.request("POST", "/inbox/revert", form=form)
    assert status == 400 and "changed since the agent wrote it" in body
    assert "the user's addition" in note.read_text()


def test_the_overview_with_no_vault_registered_says_what_to_do(server, conn) -> None:
    status, body, _ = server.request("GET", "/")
    assert status == 200 and "vaultmem init" in body
    status, body, _ = server.request("GET", "/quarantine")
    assert status == 404 and "vaultmem init" in body


def test_the_command_serves_on_localhost_and_stops_with_its_terminal(reviewed_vault) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "vaultmem", "ui", "--no-browser", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As started from a terminal: a suite run under `nohup` would hand it SIGHUP ignored.
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL),
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith("vaultmem ui: http://127.0.0.1:"), line
        url = urlsplit(line.split(": ", 1)[1].strip())
        token = parse_qs(url.query)["token"][0]
        c = http.client.HTTPConnection("127.0.0.1", url.port, timeout=120)
        c.request("GET", f"/?token={token}", headers={"Host": url.netloc})
        r = c.getresponse()
        r.read()
        assert r.status == 303
        cookie = r.getheader("set-cookie", "").split(";")[0]
        c.request("GET", "/quarantine", headers={"Host": url.netloc, "Cookie": cookie})
        r = c.getresponse()
        page = r.read().decode()
        assert r.status == 200 and "4 file(s) quarantined" in page
        no_secret(page)
        c.close()
        proc.send_signal(signal.SIGHUP)  # the terminal closing
        proc.wait(timeout=60)  # ends: the test fails with TimeoutExpired otherwise
        assert token not in proc.stderr.read().replace(line, "")
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_token_in_a_file_name_never_reaches_the_page(server, browser, conn, vault) -> None:
    token = "ghp_" + "".join(random.Random(7).choices(string.ascii_letters + string.digits, k=36))
    vault.write(f"ops/{token}.md", "# Deploy token\n\nrotated monthly\n")
    vault.write("a.md", CLEAN)
    vault.commit()
    vaults.register(vault.root, database_url=os.environ["VAULTMEM_DATABASE_URL"])
    index(vault.root)
    pages = [open_page(server, browser, "/quarantine")]
    assert "token-in-path" in pages[0] and "ops/ghp_" in pages[0]
    pages.append(browser.click("tbody tr a"))
    assert "token-in-path" in pages[1]
    pages.append(browser.click("form[action='/quarantine/allow'] button"))  # it asks first
    assert "looks like a real credential" in pages[2]
    pages.append(browser.click("#confirm"))
    assert "allowed ops/ghp_" in pages[3]
    pages.append(open_page(server, browser, "/quarantine"))
    for page in pages:
        assert token not in page and token[4:] not in page


def test_a_busy_port_is_one_line_with_the_next_step(reviewed_vault) -> None:
    from click.testing import CliRunner

    from vaultmem.cli import cli

    with bind(0) as taken:
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["ui", "--no-browser", "--port", str(port)])
    assert result.exit_code == 1
    assert result.stderr.startswith(f"Error: cannot listen on 127.0.0.1:{port} (")
    assert "--port 0" in result.stderr and result.stderr.count("\n") == 1


def test_an_unregistered_vault_is_refused_before_anything_starts(reviewed_vault, tmp_path) -> None:
    from click.testing import CliRunner

    from vaultmem.cli import cli

    result = CliRunner().invoke(
        cli, ["ui", "--no-browser", "--port", "0", "--vault", str(tmp_path)]
    )
    assert result.exit_code == 2 and "is not a registered vault" in result.stderr
    assert "vaultmem ui: http" not in result.stderr


@pytest.mark.parametrize(
    ("seconds", "words"), [(0.2, "1 s"), (89, "89 s"), (600, "10 min"), (7200, "2.0 h")]
)
def test_the_time_left_reads_as_status_words_it(seconds: float, words: str) -> None:
    from vaultmem.cli.base import duration as status_words
    from vaultmem.web.app import duration

    assert duration(seconds) == words == status_words(seconds)
