"""Log in and out (only with a users file); ``/`` goes to the cluster page."""

from __future__ import annotations

from urllib.parse import urlsplit

from aiohttp import web

from ledgermq.console.auth import CURRENT_SESSION, cookie_name, current_session, set_cookie
from ledgermq.console.pages.forms import posted, text
from ledgermq.console.render import render
from ledgermq.console.state import console_of
from ledgermq.console.users import check_password

routes = web.RouteTableDef()


def _safe_next(target: str) -> str:
    """Only a path of this console (no scheme, host or ``//``): no open redirect."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/cluster"
    return target


@routes.get("/")
async def home(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/cluster")


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.StreamResponse:
    return web.Response(text="ok\n")


@routes.get("/login")
async def login_form(request: web.Request) -> web.StreamResponse:
    if not console_of(request).settings.login_required:
        raise web.HTTPSeeOther("/cluster")
    return render(request, "login.html", next=_safe_next(request.query.get("next", "/cluster")))


@routes.post("/login")
async def login(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    if not console.settings.login_required:
        raise web.HTTPSeeOther("/cluster")
    form = await posted(request)
    target = _safe_next(text(form, "next", default="/cluster"))
    user = check_password(console.users, text(form, "username"), str(form.get("password") or ""))
    if user is None:
        return render(request, "login.html", status=401, next=target, error="wrong user name or password")
    console.sessions.drop(current_session())
    session = console.sessions.new(user)  # a new token: a session fixed before login is worthless
    CURRENT_SESSION.set(session)
    response = web.HTTPSeeOther(target)
    set_cookie(request, response, session)
    raise response


@routes.post("/logout")
async def logout(request: web.Request) -> web.StreamResponse:
    console_of(request).sessions.drop(current_session())
    response = web.HTTPSeeOther("/login" if console_of(request).settings.login_required else "/cluster")
    response.del_cookie(cookie_name(request), path="/")
    raise response
