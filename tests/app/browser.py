"""Serve the app with ``core app`` and drive it in headless Chromium (Debian's ``chromium``).

Chromium is driven over the DevTools protocol (a websocket), so a test waits in real time
for what it expects (Streamlit renders over its own websocket; timers like the refresh of
a running run fire in real time) instead of guessing a virtual-time budget. Used by the
end-to-end tests, and as a script for the README's screenshot (the command is in
docs/app.md, "Tests"): ``--query`` opens a linked view, ``--tab`` a chosen tab.

    .venv/bin/python tests/app/browser.py --db runs/mirage.duckdb --out shot.png

Every process started here runs in its own session and is killed with its whole process
group on the way out, whatever happened.
"""

from __future__ import annotations

import argparse
import base64
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from websockets.sync.client import connect

REPO = Path(__file__).resolve().parents[2]
# The flags the environment docs give for headless Chromium here (no sandbox as root, no
# GPU, nothing fetched from the network); each browser gets a fresh --user-data-dir.
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def kill_group(proc: subprocess.Popen, grace: float) -> None:
    """SIGTERM the process group, SIGKILL it after ``grace`` seconds (and any child left
    once the leader is gone)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _wait_for(what: str, check: Callable[[], bool], timeout: float, log: Path | None = None,
              interval: float = 0.3) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            tail = f":\n{log.read_text()[-3000:]}" if log else ""
            raise TimeoutError(f"{what} after {timeout:g}s{tail}")
        time.sleep(interval)


@contextmanager
def serve(db: Path, log: Path, *, timeout: float = 90.0) -> Iterator[str]:
    """``core app --db DB --port FREE --headless``; yields its URL once healthy."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    command = [sys.executable, "-m", "mirage", "app", "--db", str(db),
               "--port", str(port), "--headless"]
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
                                start_new_session=True)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"core app exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(url + "_stcore/health", timeout=2) as reply:
                return reply.read().strip() == b"ok"
        except OSError:
            return False

    try:
        _wait_for("core app not healthy", healthy, timeout, log)
        yield url
    finally:
        kill_group(proc, grace=10.0)


class Page:
    """One tab of a headless Chromium, over the DevTools protocol."""

    def __init__(self, websocket_url: str) -> None:
        self._socket = connect(websocket_url, max_size=None, open_timeout=30)
        self._ids = itertools.count(1)

    def call(self, method: str, timeout: float = 60.0, **params) -> dict:
        """Send one command and return its result (events in between are skipped)."""
        message_id = next(self._ids)
        self._socket.send(json.dumps({"id": message_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            reply = json.loads(self._socket.recv(timeout=max(0.1, deadline - time.monotonic())))
            if reply.get("id") == message_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def dom(self) -> str:
        result = self.call("Runtime.evaluate", expression="document.documentElement.outerHTML",
                           returnByValue=True)
        return result["result"].get("value", "")

    def wait_for(self, what: str, predicate: Callable[[str], bool], timeout: float) -> str:
        """Poll the DOM until ``predicate`` holds; returns that DOM (TimeoutError if never)."""
        found: list[str] = []

        def check() -> bool:
            found[:] = [self.dom()]
            return predicate(found[0])

        _wait_for(f"the page never showed {what}", check, timeout, interval=0.5)
        return found[0]

    def click_tab(self, name: str) -> None:
        """Open the page's tab called ``name`` (Streamlit's tabs are elements of role tab)."""
        script = ("(tab => tab ? (tab.click(), 'clicked') : 'missing')("
                  "[...document.querySelectorAll('[role=\"tab\"]')]"
                  f".find(t => t.innerText.trim() === {json.dumps(name)}))")
        result = self.call("Runtime.evaluate", expression=script, returnByValue=True)
        if result["result"].get("value") == "missing":
            raise LookupError(f"no tab called {name!r}")

    def screenshot(self, path: Path) -> None:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        self._socket.close()


@contextmanager
def browser(window: tuple[int, int] = (1400, 1000)) -> Iterator[Page]:
    """A fresh headless Chromium (own profile directory) and its first tab."""
    binary = chromium()
    if binary is None:
        raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
    profile = Path(tempfile.mkdtemp(prefix="mirage-chromium-"))
    port_file = profile / "DevToolsActivePort"
    proc = subprocess.Popen(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-port=0",
         f"--window-size={window[0]},{window[1]}", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    page = None
    try:
        _wait_for("Chromium did not open its DevTools port", port_file.exists, 60)
        port = port_file.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            tabs = [t for t in json.loads(reply.read()) if t.get("type") == "page"]
        page = Page(tabs[0]["webSocketDebuggerUrl"])
        yield page
    finally:
        if page is not None:
            page.close()
        kill_group(proc, grace=5.0)
        shutil.rmtree(profile, ignore_errors=True)


def rendered_charts(dom: str) -> int:
    """Vega charts drawn as SVG in the page (Streamlit's chart element, vega-embed inside)."""
    return len(re.findall(r'data-testid="stVegaLiteChart"[^>]*><svg[^>]*class="marks"', dom))


def script_idle(dom: str) -> bool:
    """Streamlit shows a Stop button while the script (or a fragment) is running."""
    return 'data-testid="stStatusWidgetRunningIcon"' not in dom and ">Stop<" not in dom


def load_twice(page: Page, url: str, *, charts: int, timeout: float = 120.0) -> str:
    """Open the page, then open it again (the first load after a start can be incomplete)
    and wait until ``charts`` charts are drawn; returns the DOM of the second load."""
    page.open(url)
    try:
        page.wait_for("the first load's charts", lambda d: rendered_charts(d) >= 1, timeout)
    except TimeoutError:
        pass  # the second load is the one that counts
    page.open(url)
    return page.wait_for(f"{charts} charts", lambda d: rendered_charts(d) >= charts, timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1100)
    parser.add_argument("--charts", type=int, default=5, help="wait for this many charts")
    parser.add_argument("--query", default="",
                        help="the page's query string, e.g. group=filter.name")
    parser.add_argument("--tab", help="open this tab before the screenshot")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        with serve(args.db, Path(tmp) / "app.log") as url, \
                browser((args.width, args.height)) as page:
            load_twice(page, url + (f"?{args.query}" if args.query else ""), charts=args.charts)
            page.wait_for("an idle script", script_idle, 60)
            if args.tab:
                page.click_tab(args.tab)
                time.sleep(2)  # the tab's charts draw once they are visible
            time.sleep(1)  # let the last chart finish drawing
            page.screenshot(args.out)
    print(args.out)


if __name__ == "__main__":
    main()
