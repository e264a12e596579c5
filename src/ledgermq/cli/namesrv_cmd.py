"""``ledgermq namesrv``: run a name server."""

from __future__ import annotations

from pathlib import Path

import click

from ledgermq.cli.runtime import read_properties, serve
from ledgermq.cli.tls_setup import SERVER_TLS_KEYS, install_process_tls
from ledgermq.config import config_from_properties, known_keys
from ledgermq.config_keys import check_unimplemented_keys
from ledgermq.controller.config import ControllerConfig
from ledgermq.errors import ConfigError
from ledgermq.namesrv.app import NamesrvApp, NamesrvConfig
from ledgermq.startup import bind_failed


@click.command()
@click.option(
    "-c",
    "--conf",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="namesrv .properties file",
)
@click.option("-p", "--port", type=int, default=None, help="listen port (default 9876)")
@click.option("--host", default=None, help="listen address (listenHost; default 0.0.0.0, all interfaces, as RocketMQ)")
@click.option("--kv-config", type=click.Path(path_type=Path), default=None, help="kvConfig.json path")
def namesrv(conf: Path | None, port: int | None, host: str | None, kv_config: Path | None) -> None:
    """Run a name server (RocketMQ 4.x protocol)."""
    props = read_properties(conf)
    with_controller = props.get("enableControllerInNamesrv", "").strip().lower() == "true"
    known = known_keys(NamesrvConfig) | (known_keys(ControllerConfig) if with_controller else set()) | SERVER_TLS_KEYS
    try:
        check_unimplemented_keys(props, known)
    except ConfigError as exc:
        raise click.ClickException(f"{conf}: {exc}") from exc
    overrides: dict[str, object] = {}
    if port is not None:
        overrides["listen_port"] = port
    if host is not None:
        overrides["listen_host"] = host
    if kv_config is not None:
        overrides["kv_config_path"] = str(kv_config)
    try:
        cfg = config_from_properties(NamesrvConfig, props, **overrides)
        controller = config_from_properties(ControllerConfig, props) if cfg.enable_controller else None
        install_process_tls(props, conf)
    except ConfigError as exc:
        raise click.ClickException(f"{conf}: {exc}") from exc
    app = NamesrvApp(cfg, controller=controller)

    async def start() -> None:
        try:
            await app.start()
        except OSError as exc:
            key = "--port (listenPort)"
            raise bind_failed("name server port", cfg.listen_host, cfg.listen_port, key, exc) from None
        click.echo(f"ledgermq namesrv listening on {cfg.listen_host}:{app.port}", err=True)
        if app.controller is not None:
            node = app.controller.node
            click.echo(f"ledgermq controller {node.config.group}/{node.config.self_id} at {node.address}", err=True)

    serve(start, app.stop)
