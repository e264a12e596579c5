"""Who may do what, and protection against requests forged by other sites.

* Every browser gets a session (an unguessable cookie, HttpOnly, SameSite=Strict) holding a
  CSRF token; every POST must carry that token in its form, and an ``Origin`` header, when
  the browser sends one, must name this console. This holds without a users file too: a
  page on another site must not be able to drive a console on 127.0.0.1.
* With a users file, every page but the login page needs a logged-in session, and a
  read-only user's POSTs are refused (403) before any handler runs; logging in replaces
  the session (no fixation).
* The Host header must name the address served (a loopback console answers only to
  loopback names), so a DNS-rebinding page cannot read it either.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from urllib.parse import quote

from aiohttp import web

from ledgermq.clock import SYSTEM_CLOCK
from ledgermq.console.settings import is_loopback
from ledgermq.console.users import ANONYMOUS, User

COOKIE = "ledgermq_console"  # + the port: cookies are per host, not per port, and two consoles may share a host
CSRF_FIELD = "_csrf"
OPEN_PATHS = ("/static/", "/login", "/healthz")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class Session:
    token: str
    user: User | None  # None: not logged in yet (the login form's session)
    expires_at: float
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))


# The session of the request being handled: aiohttp runs each request in its own task, so the
# value the middleware sets is what that request's handler and templates see.
CURRENT_SESSION: ContextVar[Session | None] = ContextVar("console_session", default=None)


def current_session() -> Session:
    session = CURRENT_SESSION.get()
    if session is None:
        raise RuntimeError("no console session: the auth middleware did not run")
    return session


class Sessions:
    """In-memory sessions (a restart logs everyone out), bounded in number."""

    def __init__(
        self, ttl_s: float, clock: Callable[[], float] = SYSTEM_CLOCK.monotonic, max_sessions: int = 10_000
    ) -> None:
        self.ttl_s = ttl_s
        self.clock = clock
        self.max_sessions = max_sessions
        self._by_token: dict[str, Session] = {}

    def new(self, user: User | None) -> Session:
        now = self.clock()
        if len(self._by_token) >= self.max_sessions:
            self._by_token = {t: s for t, s in self._by_token.items() if s.expires_at > now}
            while len(self._by_token) >= self.max_sessions:
                self._by_token.pop(next(iter(self._by_token)))
        session = Session(secrets.token_urlsafe(32), user, now + self.ttl_s)
        self._by_token[session.token] = session
        return session

    def get(self, token: str | None) -> Session | None:
        if not token:
            return None
        session = self._by_token.get(token)
        if session is None:
            return None
        if session.expires_at <= self.clock():
            del self._by_token[session.token]
            return None
        return session

    def drop(self, session: Session) -> None:
        self._by_token.pop(session.token, None)


def cookie_name(request: web.Request) -> str:
    return f"{COOKIE}_{request.url.port or 0}"


def set_cookie(request: web.Request, response: web.StreamResponse, session: Session) -> None:
    response.set_cookie(cookie_name(request), session.token, httponly=True, samesite="Strict", path="/")


def _host_allowed(host_header: str, served_host: str) -> bool:
    """A loopback console answers only to loopback names; any other to anything (its users
    file guards it)."""
    if not is_loopback(served_host):
        return True
    name = host_header.rsplit(":", 1)[0] if not host_header.endswith("]") else host_header
    name = name.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _same_origin(request: web.Request) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:  # older browsers and non-browser clients: the CSRF token decides
        return True
    return origin == f"{request.scheme}://{request.host}"


class Forbidden(web.HTTPForbidden):
    """A refusal whose text the error page shows."""

    def __init__(self, why: str) -> None:
        super().__init__(reason="Forbidden", text=why)
        self.why = why


def auth_middleware(
    sessions: Sessions, login_required: bool, served_host: str
) -> Callable[..., Awaitable[web.StreamResponse]]:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if not _host_allowed(request.host, served_host):
            raise Forbidden(f"this console answers only to {served_host}, not to Host {request.host!r}")
        if request.path.startswith("/static/") or request.path == "/healthz":
            return await handler(request)
        session = sessions.get(request.cookies.get(cookie_name(request)))
        fresh = session is None
        if session is None:
            session = sessions.new(None if login_required else ANONYMOUS)
        CURRENT_SESSION.set(session)
        if request.method not in ("GET", "HEAD", "OPTIONS"):
            form = await request.post()
            token = form.get(CSRF_FIELD)
            if fresh or not isinstance(token, str) or not hmac.compare_digest(token, session.csrf):
                raise Forbidden("the form is stale or came from another site (CSRF check failed); reload the page")
            if not _same_origin(request):
                raise Forbidden(f"a request from {request.headers.get('Origin')} may not change this console")
        if session.user is None and not request.path.startswith("/login"):
            if request.method in ("GET", "HEAD"):
                target = web.HTTPSeeOther(f"/login?next={quote(request.path_qs, safe='')}")
                set_cookie(request, target, session)
                raise target
            raise Forbidden("log in first")
        if (
            request.method not in ("GET", "HEAD", "OPTIONS")
            and session.user is not None
            and not session.user.admin
            and request.path not in ("/logout", "/login")
        ):
            raise Forbidden(f"user {session.user.name} is read-only: changes need an admin user")
        response = await handler(request)
        if fresh:
            set_cookie(request, response, current_session())
        return response

    return middleware
