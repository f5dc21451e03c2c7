"""A real headless Chromium driven over the DevTools protocol, for the report page tests.

Why the DevTools protocol and not ``chromium --screenshot`` + grepping stderr: the protocol
reports every uncaught exception (``Runtime.exceptionThrown``), every ``console.error``
(``Runtime.consoleAPICalled``), every browser-side error such as a CSP violation or a failed
load (``Log.entryAdded``) and every request the page makes (``Network.requestWillBeSent``)
as structured events -- no log format to guess -- and it lets a test click a real table
header (``Input.dispatchMouseEvent``) and read the DOM back.

Transport: ``--remote-debugging-pipe``: Chromium reads NUL-terminated JSON commands from its
fd 3 and writes replies and events to its fd 4.  No port, no websocket library, nothing
left listening.  The browser runs with a throwaway profile and is killed (process group)
on exit, also when a test fails.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
COMMAND_TIMEOUT = 30.0


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def require_chromium() -> str:
    """Chromium's path; skip without it -- but FAIL under ``CI=true`` (setup.sh installs it)."""
    found = find_chromium()
    if found is None:
        message = f"no Chromium on PATH (tried {', '.join(CHROMIUM_NAMES)}; Debian package: chromium)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true and {message}", pytrace=False)
        pytest.skip(message)
    return found


class BrowserError(RuntimeError):
    pass


def _high_fd(fd: int) -> int:
    """The same pipe end moved to a descriptor >= 10, so the shell redirection below cannot clash with 3/4."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
    os.close(fd)
    return moved


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, executable: str, *, width: int = 1280, height: int = 1000) -> None:
        self._profile = tempfile.mkdtemp(prefix="tidemark-chromium-")
        command_read, self._command_write = os.pipe()
        self._event_read, event_write = os.pipe()
        command_read, event_write = _high_fd(command_read), _high_fd(event_write)
        arguments = [
            executable,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--remote-debugging-pipe",
            f"--user-data-dir={self._profile}",
            f"--window-size={width},{height}",
            "about:blank",
        ]
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 -- lives as long as the browser; closed in close()
        # bash (not dash: dash handles only single-digit descriptors) puts the pipe ends on fds 3 and 4.
        self._process = subprocess.Popen(
            [
                "bash",
                "-c",
                f'exec "$@" 3<&{command_read} 4>&{event_write} {command_read}<&- {event_write}>&-',
                "bash",
                *arguments,
            ],
            pass_fds=(command_read, event_write),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            start_new_session=True,
        )
        os.close(command_read)
        os.close(event_write)
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_messages, name="chromium-devtools", daemon=True)
        self._reader.start()
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self._session = ""
        try:
            target = self._command("Target.createTarget", {"url": "about:blank"})["targetId"]
            self._session = self._command("Target.attachToTarget", {"targetId": target, "flatten": True})[
                "sessionId"
            ]
            for domain in ("Runtime", "Log", "Page", "Network"):
                self.command(f"{domain}.enable")
            self.command(
                "Emulation.setDeviceMetricsOverride",
                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            )
        except BaseException:
            self.close()
            raise

    def _read_messages(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._event_read, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                self._replies.put(None)
                return
            buffer += chunk
            while b"\0" in buffer:
                message, buffer = buffer.split(b"\0", 1)
                self._replies.put(json.loads(message))

    def _next_message(self, deadline: float) -> dict[str, Any]:
        try:
            message = self._replies.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise BrowserError(f"Chromium did not answer within {COMMAND_TIMEOUT} s") from None
        if message is None:
            raise BrowserError(f"Chromium exited: {self.stderr_tail()}")
        return message

    def _command(
        self, method: str, params: dict[str, Any] | None = None, session: str | None = None
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._command_write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while True:
            reply = self._next_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def command(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one DevTools command to the page and return its result."""
        return self._command(method, params, self._session)

    def wait_for_event(self, method: str, timeout: float = COMMAND_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        seen = len(self.events)
        while True:
            for event in self.events[seen:]:
                if event.get("method") == method:
                    return event
            seen = len(self.events)
            self.events.append(self._next_message(deadline))

    def open(self, path: Path) -> None:
        """Load a local file and wait for its load event."""
        self.command("Page.navigate", {"url": path.resolve().as_uri()})
        self.wait_for_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        result = self.command("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (press + release) at the centre of the first element matching ``selector``."""
        box = self.evaluate(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.scrollIntoView();"
            " const r = e.getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        x, y = box
        for kind in ("mousePressed", "mouseReleased"):
            self.command(
                "Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1}
            )

    def screenshot(self, target: Path, *, full_page: bool = True) -> Path:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": full_page}
        target.write_bytes(base64.b64decode(self.command("Page.captureScreenshot", params)["data"]))
        return target

    def errors(self) -> list[str]:
        """Every script exception, ``console.error``/``assert`` and browser error logged so far."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]
                description = details.get("exception", {}).get("description", details.get("text"))
                found.append(f"uncaught exception at line {details.get('lineNumber')}: {description}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                found.append(
                    "console." + params["type"] + ": " + " ".join(str(a.get("value")) for a in params["args"])
                )
            elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
                found.append(f"browser error: {params['entry'].get('text')}")
        return found

    def requested_urls(self) -> list[str]:
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e.get("method") == "Network.requestWillBeSent"
        ]

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._command_write)  # Chromium exits when its command pipe closes
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(timeout=10)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)  # helpers (zygote, renderers) of its session
            self._reader.join(timeout=5)
            os.close(self._event_read)
            self._stderr.close()
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
