"""The console's pages, one module each; ``register_all`` adds their routes."""

from __future__ import annotations

from aiohttp import web


def register_all(app: web.Application) -> None:
    from ledgermq.console.pages import cluster, consumers, login, messages, producers, topics, trends

    for module in (login, cluster, topics, consumers, producers, messages, trends):
        app.router.add_routes(module.routes)
