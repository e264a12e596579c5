"""``ledgermq controller -c FILE``: run one node of a controller group on its own.

The file holds RocketMQ 5's controller keys (controllerDLegerGroup, controllerDLegerPeers,
controllerDLegerSelfId, controllerStorePath, ...; see docs/controller.md). The node answers
controller requests on its Raft address, and on ``listenPort`` too when that is set.
"""

from __future__ import annotations

from pathlib import Path

import click

from ledgermq.cli.runtime import read_properties, serve
from ledgermq.cli.tls_setup import SERVER_TLS_KEYS, install_process_tls
from ledgermq.config import config_from_properties, known_keys
from ledgermq.config_keys import check_unimplemented_keys
from ledgermq.controller.config import ControllerConfig
from ledgermq.controller.service import ControllerService
from ledgermq.errors import ConfigError
from ledgermq.net.server import RemotingServer
from ledgermq.startup import bind_failed


@click.command()
@click.option(
    "-c",
    "--conf",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    required=True,
    help="controller .properties file (RocketMQ 5 controller keys)",
)
@click.option("--host", default="0.0.0.0", show_default=True, help="address to listen on")
def controller(conf: Path, host: str) -> None:
    """Run a controller node (RocketMQ 5 controller mode: broker-group masters, epochs, SyncStateSets)."""
    props = read_properties(conf)
    try:
        check_unimplemented_keys(props, known_keys(ControllerConfig) | SERVER_TLS_KEYS)
        cfg = config_from_properties(ControllerConfig, props)
        install_process_tls(props, conf)
    except ConfigError as exc:
        raise click.ClickException(f"{conf}: {exc}") from exc
    service = ControllerService(cfg, listen_host=host)
    extra: RemotingServer | None = None
    if cfg.listen_port and cfg.listen_port != service.node.server.port:
        extra = RemotingServer(host, cfg.listen_port, name="controller-requests")
        service.attach(extra)

    async def start() -> None:
        try:
            await service.start()
        except OSError as exc:
            raise bind_failed(
                "controller Raft address", host, service.node.server.port, "controllerDLegerPeers", exc
            ) from None
        if extra is not None:
            try:
                await extra.start()
            except OSError as exc:
                await service.stop()
                raise bind_failed("controller port", host, cfg.listen_port, "listenPort", exc) from None
        where = service.node.address + (f" and port {cfg.listen_port}" if extra is not None else "")
        click.echo(f"ledgermq controller {cfg.group}/{cfg.self_id} answering on {where}", err=True)

    async def stop() -> None:
        if extra is not None:
            await extra.stop()
        await service.stop()

    serve(start, stop)
