"""A real headless Chromium for the web-room tests, driven over the DevTools protocol.

`--remote-debugging-pipe` speaks the protocol over file descriptors 3 (commands in) and 4
(answers and events out), NUL-separated JSON: no port, no WebSocket library. Evaluating a
click through the protocol is not subject to the page's Content-Security-Policy, so the pages
themselves stay script-free.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

# How long one protocol answer may take before the test fails (a hung browser must not hang
# the suite); never a limit on how fast a page must be.
ANSWER_TIMEOUT = 120.0


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class BrowserError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one tab; `close()` (or the context manager) always ends it."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def child_fds() -> None:
            # Copies first, so that neither end is overwritten by the other's dup2.
            a, b = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "--window-size=1280,800",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # The parent's own descriptors are close-on-exec (Python's default); 3 and 4, made
            # by dup2 after the fork, are not.
            close_fds=False,
            preexec_fn=child_fds,
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._next = 0
        self._events: list[dict[str, Any]] = []
        try:
            target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
            self.session = self.call(
                "Target.attachToTarget", {"targetId": target, "flatten": True}
            )["sessionId"]
            self.call("Page.enable", session=True)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False},
                session=True,
            )
        except BaseException:
            self.close()
            raise

    # --- the protocol ---------------------------------------------------------------------

    def _read(self) -> dict[str, Any]:
        deadline = time.monotonic() + ANSWER_TIMEOUT
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._from_chrome], [], [], max(0.0, left))
            if not ready:
                raise BrowserError("chromium did not answer")
            chunk = os.read(self._from_chrome, 1 << 16)
            if not chunk:
                raise BrowserError("chromium exited")
            self._buf += chunk
        message, _, self._buf = self._buf.partition(b"\0")
        return json.loads(message)

    def call(self, method: str, params: dict[str, Any] | None = None, *, session: bool = False):
        self._next += 1
        msg: dict[str, Any] = {"id": self._next, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            answer = self._read()
            if answer.get("id") == self._next:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._events.append(answer)

    def _wait_event(self, name: str) -> None:
        while True:
            for i, e in enumerate(self._events):
                if e.get("method") == name:
                    del self._events[: i + 1]
                    return
            self._events.clear()
            self._events.append(self._read())

    # --- what a test does -------------------------------------------------------------------

    def go(self, url: str) -> str:
        """Open `url`, wait for the page to load, return its DOM as HTML."""
        self._events.clear()
        self.call("Page.navigate", {"url": url}, session=True)
        self._wait_event("Page.loadEventFired")
        return self.html()

    def evaluate(self, expression: str) -> Any:
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True
        )
        return result.get("result", {}).get("value")

    def html(self) -> str:
        return str(self.evaluate("document.documentElement.outerHTML"))

    def text(self) -> str:
        return str(self.evaluate("document.body.innerText"))

    def url(self) -> str:
        return str(self.evaluate("location.href"))

    def click(self, selector: str) -> str:
        """Click the element (a form's button: the browser posts the form) and wait for the
        next page to load; its DOM as HTML."""
        self._events.clear()
        found = self.evaluate(
            f"(() => {{ const el = document.querySelector({json.dumps(selector)});"
            " if (!el) return false; el.click(); return true; })()"
        )
        if not found:
            raise BrowserError(f"no element {selector!r} on {self.url()}")
        self._wait_event("Page.loadEventFired")
        return self.html()

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                try:
                    self.call("Browser.close")
                except (BrowserError, OSError):
                    pass
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            for fd in (self._to_chrome, self._from_chrome):
                try:
                    os.close(fd)
                except OSError:
                    pass

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
