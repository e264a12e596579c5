"""Real processes and a real browser for the console tests.

* ``ConsoleProcess``: ``ledgermq console`` as a child process on a free loopback port (killed
  by pid in ``close``), ready once ``/healthz`` answers.
* ``Browser``: Debian's chromium (``/usr/bin/chromium``, installed by ``make test``) driven by
  Playwright with a new empty profile; every page records its console errors and uncaught
  exceptions, so a test can assert a page loaded cleanly. ``shoot`` saves a screenshot under
  the test's tmp directory and, when ``LEDGERMQ_CONSOLE_SCREENSHOTS`` names a directory
  (``docs/img``), there too: that is how docs/console.md's pictures are made.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ledgermq.testing.ports import free_port
from tests.compat.cluster import HOST, ServerProcess, tail, wait_until

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS_ENV = "LEDGERMQ_CONSOLE_SCREENSHOTS"


class ConsoleProcess:
    def __init__(self, root: Path, namesrv: str, *extra: str, name: str = "console") -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        root.mkdir(parents=True, exist_ok=True)
        args = ["console", "-n", namesrv, "--host", HOST, "--port", str(self.port), *extra]
        self.server = ServerProcess(name, args, root / f"{name}.log")

    def start(self) -> None:
        self.server.start()
        wait_until("the console to answer", self._answers, 20, 0.1, lambda: tail(self.server.log_path))

    def _answers(self) -> bool:
        self.server.check_alive()
        try:
            with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    @property
    def pid(self) -> int:
        assert self.server.proc is not None
        return self.server.proc.pid

    def close(self) -> None:
        self.server.kill()


@dataclass
class PageProblems:
    """What went wrong inside pages: console errors and uncaught exceptions, with their URL."""

    errors: list[str] = field(default_factory=list)

    def clear(self) -> None:
        self.errors.clear()


class Browser:
    def __init__(self, shots_dir: Path) -> None:
        from playwright.sync_api import sync_playwright

        if not CHROMIUM.exists():
            pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get install chromium)")
        self.shots_dir = shots_dir
        self.problems = PageProblems()
        self._profile = tempfile.mkdtemp(prefix="ledgermq-console-chromium-")
        self._pw = sync_playwright().start()
        self.context = self._pw.chromium.launch_persistent_context(
            self._profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        self.context.set_default_timeout(10_000)
        self.pages: list[Any] = []

    def page(self) -> Any:
        page = self.context.new_page()
        self.pages.append(page)
        page.on("console", lambda m: m.type == "error" and self.problems.errors.append(f"{page.url}: {m.text}"))
        page.on("pageerror", lambda e: self.problems.errors.append(f"{page.url}: uncaught {e}"))
        page.on("dialog", lambda d: d.accept())  # the delete confirmations
        return page

    def close_pages(self) -> None:
        """Pages left open keep refreshing; each test starts with none."""
        for page in self.pages:
            page.close()
        self.pages.clear()

    def shoot(self, page: Any, name: str) -> Path:
        path = self.shots_dir / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        publish = os.environ.get(SHOTS_ENV)
        if publish:
            Path(publish).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(publish) / path.name)
        return path

    def close(self) -> None:
        try:
            self.context.close()
        finally:
            self._pw.stop()
            shutil.rmtree(self._profile, ignore_errors=True)


@contextmanager
def browser(shots_dir: Path) -> Iterator[Browser]:
    b = Browser(shots_dir)
    try:
        yield b
    finally:
        b.close()
