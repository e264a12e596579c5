"""The cluster page: broker groups, modes, roles and replication state, refreshed in place
(``/live/cluster`` every few seconds) so a failover shows without a reload."""

from __future__ import annotations

from aiohttp import web

from ledgermq.console.cluster_view import ClusterView
from ledgermq.console.render import render
from ledgermq.console.state import Console, console_of

routes = web.RouteTableDef()


async def _view(console: Console) -> ClusterView:
    return await console.answers.get("cluster", console.watcher.look)


@routes.get("/cluster")
async def cluster_page(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    return render(request, "cluster.html", view=await _view(console), controller=console.settings.controller_addrs)


@routes.get("/live/cluster")
async def cluster_live(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    return render(request, "cluster_live.html", view=await _view(console), controller=console.settings.controller_addrs)
