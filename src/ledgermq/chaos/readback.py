"""Reading the topic back after a run: every queue from each broker directly, and through
the normal client path.

``read_broker`` sends PULL_MESSAGE straight to one broker address (the master and the
slave separately, so each one's copy is checked), from the queue's first offset until a
pull finds nothing new. ``read_client`` uses the lite pull consumer (routes from the name
server, the broker the client would pick) with every queue assigned and sought to its
beginning. Both return ``ReadBack``: queue -> offset -> (seq, sender) of chaos messages
(None for a record that is not one), and the hash of each chaos message's body as served.
A broker read decodes without checking body CRCs, so a corrupt body served is seen and
compared rather than hidden behind a decoding error; a pull whose records do not decode at
all is counted as a corrupt answer. Loops are bounded by count and time.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from ledgermq.chaos.workload import content_digest, parse_body
from ledgermq.client import ConsumeFromWhere, LitePullConsumer
from ledgermq.client.instance.tls import client_tls
from ledgermq.client.tls import TlsOptions
from ledgermq.net.client import RemotingClient
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.message import decode_records

READ_GROUP = "chaos-checker"
BUSY_RETRY_S = 0.1
PULL_BATCH = 32
FLAG_SUBSCRIPTION = 0x4
Entry = tuple[int, int] | None  # (seq, sender)


@dataclass(slots=True)
class ReadBack:
    source: str
    queues: dict[int, dict[int, Entry]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    digests: dict[int, dict[int, str]] = field(default_factory=dict)  # queue -> offset -> body hash
    corrupt_pulls: int = 0  # answers whose records did not decode
    busy_answers: int = 0  # SYSTEM_BUSY answers, each followed by the same pull again

    def keep(self, queue_id: int, offset: int, body: bytes) -> None:
        entry = parse_body(body)
        self.queues.setdefault(queue_id, {})[offset] = entry
        if entry is not None:
            self.digests.setdefault(queue_id, {})[offset] = content_digest(body)

    def count(self) -> int:
        return sum(len(q) for q in self.queues.values())


async def _pull(client: RemotingClient, addr: str, topic: str, queue_id: int, offset: int) -> RemotingCommand:
    ext = {
        "consumerGroup": READ_GROUP,
        "topic": topic,
        "queueId": queue_id,
        "queueOffset": offset,
        "maxMsgNums": PULL_BATCH,
        "sysFlag": FLAG_SUBSCRIPTION,
        "commitOffset": 0,
        "suspendTimeoutMillis": 0,
        "subscription": "*",
        "subVersion": 0,
        "expressionType": "TAG",
    }
    return await client.invoke(addr, RemotingCommand.request(RequestCode.PULL_MESSAGE, ext), 5.0)


async def read_broker(
    source: str,
    addr: str,
    topic: str,
    queues: int,
    *,
    max_messages: int = 2_000_000,
    timeout: float = 120.0,
    tls: TlsOptions | None = None,
) -> ReadBack:
    out = ReadBack(source)
    client = RemotingClient(connect_timeout=2.0, tls=client_tls(tls is not None, tls))
    deadline = time.monotonic() + timeout
    try:
        for qid in range(queues):
            table: dict[int, Entry] = {}
            out.queues[qid] = table
            offset = 0
            for _ in range(max_messages // PULL_BATCH + 2):
                if time.monotonic() > deadline:
                    out.errors.append(f"queue {qid}: read timed out at offset {offset}")
                    break
                try:
                    resp = await _pull(client, addr, topic, qid, offset)
                except Exception as exc:
                    out.errors.append(f"queue {qid} offset {offset}: {type(exc).__name__}: {exc}")
                    break
                if resp.code == ResponseCode.PULL_OFFSET_MOVED and offset == 0:
                    offset = int(resp.ext_fields.get("minOffset", 0))
                    continue
                if resp.code == ResponseCode.SYSTEM_BUSY:
                    # Refused for now (a DLedger member re-recovering its log): the same
                    # offset again, as a consumer does, until the read's deadline.
                    out.busy_answers += 1
                    await asyncio.sleep(BUSY_RETRY_S)
                    continue
                if resp.code != ResponseCode.SUCCESS:
                    if resp.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                        out.errors.append(f"queue {qid} offset {offset}: code {resp.code} {resp.remark}")
                    break
                try:
                    records = decode_records(resp.body, inflate=True, check_crc=False)
                except Exception as exc:
                    out.corrupt_pulls += 1
                    out.errors.append(f"queue {qid} offset {offset}: undecodable answer: {type(exc).__name__}: {exc}")
                    break
                for rec in records:
                    out.keep(qid, rec.queue_offset, rec.body)
                nxt = int(resp.ext_fields.get("nextBeginOffset", offset))
                if nxt <= offset:
                    break
                offset = nxt
    finally:
        await client.close()
    return out


async def read_client(
    namesrv: str,
    topic: str,
    expected: int,
    *,
    timeout: float = 60.0,
    idle_s: float = 5.0,
    tls: TlsOptions | None = None,
) -> ReadBack:
    """Through LitePullConsumer until ``expected`` records came or nothing came for ``idle_s``."""
    out = ReadBack("client")
    consumer = LitePullConsumer(
        READ_GROUP + "-client",
        namesrv,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        auto_commit=False,
        pull_batch_size=PULL_BATCH,
        use_tls=tls is not None,
        tls=tls,
    )
    try:
        await consumer.start()
        mqs = await consumer.fetch_message_queues(topic)
        consumer.assign(mqs)
        for mq in mqs:
            await consumer.seek_to_begin(mq)
        deadline = time.monotonic() + timeout
        last_new = time.monotonic()
        while time.monotonic() < deadline and out.count() < expected:
            batch = await consumer.poll(timeout=1.0)
            for rec in batch:
                out.keep(rec.queue_id, rec.queue_offset, rec.body)
            if batch:
                last_new = time.monotonic()
            elif time.monotonic() - last_new > idle_s:
                break
    except Exception as exc:
        out.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        try:
            await asyncio.wait_for(consumer.shutdown(), 10.0)
        except Exception as exc:
            out.errors.append(f"shutdown: {type(exc).__name__}: {exc}")
    return out
