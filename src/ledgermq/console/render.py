"""Templates (Jinja2, autoescaped: names and bodies from the cluster are data, never markup)
and the page every failure becomes: a sentence that says why, never a traceback."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import jinja2
from aiohttp import web

from ledgermq.console.auth import CSRF_FIELD, CURRENT_SESSION, Forbidden
from ledgermq.errors import LedgerError

log = logging.getLogger(__name__)
TEMPLATES_KEY = web.AppKey("templates", jinja2.Environment)
REFRESH_MS_KEY = web.AppKey("refresh_ms", int)
LOGIN_KEY = web.AppKey("login_required", bool)

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",  # no-referrer would make Chrome send "Origin: null" on form posts
}


def ms_time(ms: int | None) -> str:
    """Epoch milliseconds as local time, to the millisecond; "-" for none."""
    if not ms or ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def human_bytes(n: float | int | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} TiB"


def make_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ledgermq.console", "templates"),
        autoescape=jinja2.select_autoescape(["html"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["ms_time"] = ms_time
    env.filters["human_bytes"] = human_bytes
    env.globals["csrf_field"] = CSRF_FIELD
    return env


def render(request: web.Request, template: str, *, status: int = 200, **context: Any) -> web.Response:
    """A page (or fragment) with what every template may use: the user, the CSRF token, the
    refresh period and which navigation entry is active."""
    env = request.app[TEMPLATES_KEY]
    session = CURRENT_SESSION.get()
    user = session.user if session is not None else None
    base = {
        "user": user,
        "csrf": session.csrf if session is not None else "",
        "login_required": request.app[LOGIN_KEY],
        "can_change": user is not None and user.admin,
        "refresh_ms": request.app[REFRESH_MS_KEY],
        "path": request.path,
        "flash": None,
        "error": None,
    }
    base.update(context)
    html = env.get_template(template).render(**base)
    return web.Response(text=html, status=status, content_type="text/html")


def failure_text(exc: BaseException) -> str:
    """One line for a page: our errors carry a sentence; anything else its type and text."""
    if isinstance(exc, LedgerError):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every answer gets the security headers; every failure a page saying why."""
    try:
        response = await handler(request)
    except web.HTTPRedirection as redirect:
        redirect.headers.update(SECURITY_HEADERS)
        raise
    except Forbidden as exc:
        response = _error_page(request, 403, "Not allowed", exc.why)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = _error_page(request, exc.status, exc.reason, exc.text or exc.reason)
    except LedgerError as exc:  # the cluster refused or could not be reached: say so
        response = _error_page(request, 502, "The cluster did not do it", failure_text(exc))
    except Exception as exc:
        log.exception("console: %s %s failed", request.method, request.path)
        response = _error_page(request, 500, "The console failed", failure_text(exc))
    response.headers.update(SECURITY_HEADERS)
    return response


def _error_page(request: web.Request, status: int, title: str, why: str) -> web.Response:
    if request.path.startswith(("/live/", "/api/")):
        return web.Response(status=status, text=why, content_type="text/plain")
    try:
        return render(request, "error.html", status=status, title=title, why=why)
    except Exception:  # a template that cannot render must not hide the reason
        log.exception("console: the error page failed")
        return web.Response(status=status, text=f"{title}: {why}", content_type="text/plain")
