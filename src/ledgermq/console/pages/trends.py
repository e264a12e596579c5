"""Trends: in/out TPS per broker and per topic over the last minutes, drawn by uPlot from
``/api/trends`` (refetched every sampling interval)."""

from __future__ import annotations

from aiohttp import web

from ledgermq.console.render import render
from ledgermq.console.state import console_of

routes = web.RouteTableDef()


@routes.get("/trends")
async def trends_page(request: web.Request) -> web.StreamResponse:
    sampler = console_of(request).trends
    return render(request, "trends.html", interval_ms=int(sampler.interval_s * 1000))


@routes.get("/api/trends")
async def trends_json(request: web.Request) -> web.StreamResponse:
    return web.json_response(console_of(request).trends.snapshot())
