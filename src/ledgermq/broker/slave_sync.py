"""A slave copies its master's metadata (RocketMQ ``SlaveSynchronize``).

Every ``interval`` (10 s, first after 3 s) a slave fetches from its master, over the
remoting port, the topic configs (GET_ALL_TOPIC_CONFIG, adopted only when the master's
DataVersion differs), consumer offsets (GET_ALL_CONSUMER_OFFSET), delay offsets
(GET_ALL_DELAY_OFFSET) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG), and
persists them, so consumers can read from the slave with the master's topics and
progress, and a promoted slave starts from them.

Unlike RocketMQ, consumer offsets merge by taking the larger offset per queue: an offset a
consumer committed to the slave while its master was away is not rolled back when the
master returns with an older one (RocketMQ issues #1094/#1440 describe the re-consumption
that overwriting causes). Each part fails and logs on its own; the loop never dies.

**Which broker is the master** is asked of the name servers every round (brokerId 0 of
this broker's group), not taken from the last registration answer alone: a slave
registers every 10 s at best (registerNameServerPeriod is clamped to 10-60 s), its first
registration often comes before the master's, and a DLedger leader moves. Relying on the
answer left a DLedger follower without a master for a whole period after every start
(no sync at all), or syncing from the previous leader after an election; a chaos run
caught a topic created on the leader that no follower had copied 14 s later, when a
power loss made one of them the leader. The registration answer is used only when no
name server answers. A round that finds no master says so (rate-limited); it is never
skipped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ledgermq.aio.periodic import Periodic
from ledgermq.broker.context import Broker
from ledgermq.broker.json_file import save_json
from ledgermq.broker.offsets import ConsumerOffsetManager
from ledgermq.broker.subscriptions import SubscriptionGroupConfig
from ledgermq.net.client import RemotingClient
from ledgermq.protocol import fastjson
from ledgermq.protocol.codes import RequestCode, ResponseCode
from ledgermq.protocol.command import RemotingCommand
from ledgermq.protocol.route import DataVersion, TopicConfig
from ledgermq.store.timer.checkpoint import CheckpointData
from ledgermq.util.ratelog import limited

log = logging.getLogger(__name__)


def merge_newer_offsets(offsets: ConsumerOffsetManager, doc: object) -> bool:
    """Merge a GET_ALL_CONSUMER_OFFSET body, keeping the larger offset per queue."""
    if not isinstance(doc, dict):
        raise ValueError("an offset table body is a JSON object")
    changed = False
    for key, queues in (doc.get("offsetTable") or {}).items():
        mine = offsets.table.get(str(key), {})
        for qid, offset in queues.items():
            q, o = int(qid), int(offset)
            if o > mine.get(q, -1):
                offsets.commit_key(str(key), q, o)
                changed = True
    return changed


async def group_addrs(client: RemotingClient, namesrvs: Sequence[str], broker_name: str) -> dict[int, str] | None:
    """brokerId -> address of ``broker_name``'s group, as the first name server that
    answers GET_BROKER_CLUSTER_INFO lists it; None when none answered."""
    errors = []
    for ns in namesrvs:
        try:
            resp = await client.invoke(ns, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 3.0)
        except Exception as exc:
            errors.append(f"{ns}: {exc}")
            continue
        if resp.code != ResponseCode.SUCCESS:
            errors.append(f"{ns}: code {resp.code} {resp.remark}")
            continue
        info = fastjson.loads(resp.body) if resp.body else {}
        group = ((info.get("brokerAddrTable") or {}).get(broker_name) or {}).get("brokerAddrs") or {}
        return {int(bid): str(addr) for bid, addr in group.items()}
    if errors:
        raise ConnectionError(f"no name server answered cluster info: {'; '.join(errors)}")
    return None


class MasterOffsetReconciler:
    """A master takes back the newer offsets consumers committed to its slaves.

    While a master is away, consumers commit to a slave. When it returns, a consumer that
    restarts asks the master, which would hand back an older offset and cause the
    re-consumption RocketMQ users know (issues #1094/#1440). So a master periodically
    reads its slaves' offset tables (addresses from the name servers' cluster info) and
    keeps the larger offset per queue.
    """

    def __init__(
        self,
        broker: Broker,
        client: RemotingClient,
        namesrvs: list[str],
        interval_s: float = 10.0,
        first_delay_s: float = 3.0,
    ) -> None:
        self.broker = broker
        self.client = client
        self.namesrvs = namesrvs
        self.interval_s = interval_s
        self.first_delay_s = first_delay_s
        self.last_error = ""
        self._periodic = Periodic(type(self).__name__, self.reconcile, interval_s, first_delay=first_delay_s)

    def start(self) -> None:
        if self.namesrvs:
            self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def slave_addrs(self) -> list[str]:
        try:
            addrs = await group_addrs(self.client, self.namesrvs, self.broker.config.broker_name)
        except ConnectionError as exc:
            self.last_error = str(exc)
            return []
        return [addr for bid, addr in (addrs or {}).items() if bid != 0]

    async def reconcile(self) -> bool:
        """One round; True if any offset moved forward."""
        changed = False
        for addr in await self.slave_addrs():
            try:
                resp = await self.client.invoke(addr, RemotingCommand.request(RequestCode.GET_ALL_CONSUMER_OFFSET), 5.0)
                if resp.code != ResponseCode.SUCCESS:
                    raise RuntimeError(f"code {resp.code}: {resp.remark}")  # a refusal (ACL) is no silent skip
                if resp.body:
                    changed = merge_newer_offsets(self.broker.offsets, fastjson.loads(resp.body)) or changed
            except Exception as exc:
                self.last_error = f"offsets from slave {addr}: {exc}"
                limited.log(log, logging.WARNING, ("offset reconcile", addr), "offset reconcile: %s", self.last_error)
        if changed:
            log.info("took newer consumer offsets from slaves of %s", self.broker.config.broker_name)
        return changed


class SlaveSynchronizer:
    def __init__(
        self,
        broker: Broker,
        client: RemotingClient,
        master_addr: Callable[[], str | None],
        interval_s: float = 10.0,
        first_delay_s: float = 3.0,
        namesrvs: Sequence[str] = (),
    ) -> None:
        self.broker = broker
        self.client = client
        self.master_addr = master_addr
        """The master the last registration answer named (used when no name server answers)."""
        self.namesrvs = list(namesrvs)
        self.interval_s = interval_s
        self.first_delay_s = first_delay_s
        self.rounds = 0
        self.last_error = ""
        self.last_master: str | None = None
        self._periodic = Periodic(type(self).__name__, self.sync_all, interval_s, first_delay=first_delay_s)

    def start(self) -> None:
        self._periodic.start()

    async def stop(self) -> None:
        await self._periodic.stop()

    async def find_master(self) -> str | None:
        """The group's master now: brokerId 0 as the name servers list it (None while none
        is registered, e.g. during a DLedger election, or when that is this broker itself,
        a leader that just stepped down); the registration answer's when no name server
        answers (or none is configured)."""
        if self.namesrvs:
            try:
                addrs = await group_addrs(self.client, self.namesrvs, self.broker.config.broker_name)
            except ConnectionError as exc:
                self.last_error = str(exc)
                addrs = None
            if addrs is not None:
                master = addrs.get(0)
                return None if master == self.broker.config.broker_addr else master
        return self.master_addr()

    async def sync_all(self) -> bool:
        """One round; True if every part succeeded."""
        master = await self.find_master()
        if not master:
            self.last_error = "no master of this group is registered with the name servers (an election?)"
            limited.log(log, logging.WARNING, ("slave sync", "master"), "slave sync skipped: %s", self.last_error)
            return False
        if master != self.last_master:
            log.info("slave sync: copying metadata from the master %s", master)
            self.last_master = master
        ok = True
        parts = [self.sync_topics, self.sync_consumer_offsets, self.sync_delay_offsets, self.sync_groups]
        if self.broker.timer is not None:
            parts.append(self.sync_timer_checkpoint)
        for part in parts:
            try:
                await part(master)
            except Exception as exc:
                ok = False
                self.last_error = f"{part.__name__} from {master}: {exc}"
                # once a minute per part: a refusal (ACL) or an unreachable master repeats every round
                limited.log(log, logging.WARNING, ("slave sync", part.__name__), "slave sync: %s", self.last_error)
        self.rounds += 1
        return ok

    async def _fetch(self, master: str, code: int) -> object:
        resp = await self.client.invoke(master, RemotingCommand.request(code), 5.0)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"code {resp.code}: {resp.remark}")
        return fastjson.loads(resp.body) if resp.body else {}

    async def sync_topics(self, master: str) -> None:
        doc = await self._fetch(master, RequestCode.GET_ALL_TOPIC_CONFIG)
        assert isinstance(doc, dict)
        table = {
            name: TopicConfig.from_json({"topicName": name, **tc})
            for name, tc in (doc.get("topicConfigTable") or {}).items()
        }
        self.broker.topics.replace_all(table, DataVersion.from_json(doc.get("dataVersion")))

    async def sync_consumer_offsets(self, master: str) -> None:
        doc = await self._fetch(master, RequestCode.GET_ALL_CONSUMER_OFFSET)
        if merge_newer_offsets(self.broker.offsets, doc):
            self.broker.offsets.persist()

    async def sync_delay_offsets(self, master: str) -> None:
        doc = await self._fetch(master, RequestCode.GET_ALL_DELAY_OFFSET)
        save_json(self.broker.topics.path.with_name("delayOffset.json"), doc)
        if self.broker.schedule is not None:  # DLedger mode: a follower's (stopped) service
            self.broker.schedule.adopt(doc)  # starts from these if it becomes the leader

    async def sync_timer_checkpoint(self, master: str) -> None:
        """RocketMQ 5's syncTimerCheckPoint: the master's next timer slot and filed offset,
        so that this broker, if it takes over, starts delivering where the master was."""
        resp = await self.client.invoke(master, RemotingCommand.request(RequestCode.GET_TIMER_CHECK_POINT), 5.0)
        if resp.code != ResponseCode.SUCCESS:
            raise RuntimeError(f"code {resp.code}: {resp.remark}")
        if self.broker.timer is not None:
            await self.broker.timer.adopt(CheckpointData.decode(resp.body or b""))

    async def sync_groups(self, master: str) -> None:
        doc = await self._fetch(master, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        assert isinstance(doc, dict)
        version = DataVersion.from_json(doc.get("dataVersion"))
        subs = self.broker.subscriptions
        if version == subs.data_version:
            return
        subs.table = {
            name: SubscriptionGroupConfig.from_json({"groupName": name, **cfg})
            for name, cfg in (doc.get("subscriptionGroupTable") or {}).items()
        }
        before, subs.data_version = subs.data_version, version
        try:
            subs.persist()
        except BaseException:
            subs.data_version = before  # not written: the next sync tries again (see replace_all)
            raise
