"""``ledgermq store ...``: look into a store directory, or try one out."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ledgermq.config import StoreConfig, config_from_properties, parse_properties
from ledgermq.errors import LedgerError
from ledgermq.protocol.message import decode_records
from ledgermq.store.dledger.reseed import reseed_store
from ledgermq.store.message_input import MessageInput
from ledgermq.store.message_store import MessageStore, open_message_store
from ledgermq.store.native_store import NativeMessageStore
from ledgermq.store.verify import verify_store

console = Console()


def _first_segment_size(directory: Path) -> int | None:
    """Size of the first 20-digit-named file under ``directory`` (searched recursively)."""
    if directory.is_dir():
        for path in sorted(directory.rglob("*")):
            if path.is_file() and len(path.name) == 20 and path.name.isdigit():
                return path.stat().st_size
    return None


def _store_config(data: Path, conf: Path | None, segment_size: int | None) -> StoreConfig:
    """Config from a broker .properties file; sizes not given there are read off the files."""
    props = parse_properties(conf.read_text()) if conf else {}
    overrides: dict[str, object] = {"root_dir": str(data)}
    if "mappedFileSizeCommitLog" not in props:
        found = _first_segment_size(data / "commitlog")
        if found or segment_size:
            overrides["mapped_file_size_commitlog"] = found or segment_size
    if "mappedFileSizeConsumeQueue" not in props:
        found = _first_segment_size(data / "consumequeue")
        if found:
            overrides["mapped_file_size_consume_queue"] = found
    return config_from_properties(StoreConfig, props, **overrides)


def _ts(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds") if ms > 0 else "-"


def _summary(s: MessageStore) -> None:
    rec = s.recovery
    assert rec is not None
    console.print(
        f"[bold]{s.root}[/]  recovery: {'abnormal (last run crashed)' if rec.abnormal else 'normal'}, "
        f"{rec.records_scanned} records checked, stopped at {rec.valid_end} ({rec.stop_reason})"
    )
    t = Table(title="commit log")
    for col in ("segment", "start offset", "bytes used"):
        t.add_column(col)
    for mf in s.commitlog.segment_files():
        t.add_row(mf.path.name, str(mf.start_offset), str(mf.wrote))
    console.print(t)
    console.print(
        f"offsets: min {s.min_phy_offset}  max {s.max_phy_offset}  flushed {s.flushed_phy_offset}; "
        f"checkpoint: physic {_ts(s.checkpoint.physic_ts)}  logics {_ts(s.checkpoint.logics_ts)}  "
        f"index {_ts(s.checkpoint.index_ts)}"
    )
    q = Table(title="consume queues")
    for col in ("topic", "queue", "min offset", "max offset", "earliest store time"):
        q.add_column(col)
    for cq in sorted(s.queues.all(), key=lambda c: (c.topic, c.queue_id)):
        q.add_row(
            cq.topic,
            str(cq.queue_id),
            str(cq.min_offset),
            str(cq.max_offset),
            _ts(s.earliest_message_time(cq.topic, cq.queue_id)),
        )
    console.print(q)


@click.group()
def store() -> None:
    """Work with a message store directory (RocketMQ 4.x layout)."""


@store.command()
@click.argument("data", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "-c",
    "--conf",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="broker .properties file for segment sizes and flush settings",
)
def inspect(data: Path, conf: Path | None) -> None:
    """Open DATA (recovering it if needed) and print segments, offsets and queues.

    Segment sizes come from --conf, or else from the files already in DATA.
    """
    try:
        with open_message_store(_store_config(data, conf, None)) as s:
            _summary(s)
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from exc


@store.command()
@click.argument("data", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option(
    "-c",
    "--conf",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="broker .properties file for segment sizes",
)
@click.option("--json", "as_json", is_flag=True, help="print the findings and the summary as JSON")
def verify(data: Path, conf: Path | None, as_json: bool) -> None:
    """Check every record, digest, consume-queue unit of a stopped store in DATA.

    Changes nothing. Refuses a store a running broker holds. Exit status 1 when anything
    is corrupt (each finding names its commit-log range and the reason)."""
    try:
        report = verify_store(_store_config(data, conf, None))
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from exc
    summary = {
        "ok": report.ok,
        "segments": report.segments,
        "records": report.records,
        "digestsChecked": report.digests_checked,
        "queueUnits": report.queue_units,
        "findings": len(report.findings),
    }
    if as_json:
        doc = {"summary": summary, "findings": [dataclasses.asdict(f) for f in report.findings]}
        click.echo(json.dumps(doc, indent=1))
    else:
        for f in report.findings:
            click.echo(f"CORRUPT {f.where}: [{f.start}, {f.end}) {f.reason}")
        click.echo(
            f"{'OK' if report.ok else 'CORRUPT'}: {report.segments} segments, {report.records} records, "
            f"{report.digests_checked} digests, {report.queue_units} queue units checked; "
            f"{len(report.findings)} finding(s)"
        )
    if not report.ok:
        sys.exit(1)


@store.command()
@click.option(
    "--data",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path("./data/store"),
    show_default=True,
)
@click.option("--count", default=1000, show_default=True, help="messages to append")
def demo(data: Path, count: int) -> None:
    """Append COUNT messages to a store under DATA, read some back, and show the store."""
    try:
        with NativeMessageStore(_store_config(data, None, 1024 * 1024)) as s:
            first = s.max_offset_in_queue("DemoTopic", 0)
            for i in range(count):
                r = s.put_message(
                    MessageInput(
                        topic="DemoTopic",
                        body=f"hello {i}".encode(),
                        queue_id=i % 4,
                        properties={"TAGS": "demo", "KEYS": f"demo-{i}"},
                    )
                )
                if not r.ok:
                    raise click.ClickException(f"put failed: {r.status.value} {r.remark}")
            s.wait_dispatched()
            got = s.get_message("DemoTopic", 0, first, 4)
            for rec in decode_records(got.body()):
                console.print(f"queue 0 offset {rec.queue_offset}: {rec.body.decode()!r}  id {rec.offset_msg_id}")
            _summary(s)
    except LedgerError as exc:
        raise click.ClickException(str(exc)) from exc


@store.command()
@click.argument("source", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.argument("target", type=click.Path(path_type=Path, file_okay=False))
@click.option("--source-id", required=True, help="dLegerSelfId of the member SOURCE belongs to (n0, n1, ...)")
@click.option("--target-id", required=True, help="dLegerSelfId of the stopped member TARGET belongs to")
def reseed(source: Path, target: Path, source_id: str, target_id: str) -> None:
    """Replace the DLedger store TARGET (its broker stopped) with a copy of SOURCE.

    For a member its leader's retention left behind, or a new machine. SOURCE's broker may
    keep running; TARGET's old directory is moved aside, not deleted; TARGET keeps its own
    term and vote (docs/dledger.md, "Retention").
    """
    try:
        aside = reseed_store(source, source_id, target, target_id)
    except (LedgerError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    # Paths are printed whole (soft_wrap): a path broken across lines cannot be copied.
    console.print(f"{target} is now a copy of {source} (as {target_id})", soft_wrap=True)
    if aside is not None:
        console.print(f"the previous {target} is in {aside}", soft_wrap=True)
