"""The epoch list on disk: ``<storePathRootDir>/haEpochs``, JSON, replaced atomically.

``{"epochs": [[1, 0], [2, 10485760]], "slaveAttached": true, "inSyncSlaves": [2]}``: the
(epoch, start offset) pairs of ``epochs.EpochLog``, whether a slave reconciled with this
master during its last epoch (a master that crashed only waits for a slave before taking
writes again if one was there to hold what it may have lost), and in controller mode the
other SyncStateSet members this master last proposed or had accepted (a master that crashed
waits for one of *them*; absent: none). A missing file is an empty list: a store written
before epochs were kept, or by RocketMQ, is all epoch 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import orjson

from ledgermq.atomic_file import write_atomic
from ledgermq.errors import ConfigError
from ledgermq.ha.epochs import EpochLog, validate_pairs

FILE_NAME = "haEpochs"


@dataclass(frozen=True, slots=True)
class EpochState:
    epochs: EpochLog
    slave_attached: bool = False
    in_sync_slaves: frozenset[int] = frozenset()


class EpochFile:
    def __init__(self, store_root: str | Path) -> None:
        self.path = Path(store_root) / FILE_NAME

    def load(self) -> EpochState:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return EpochState(EpochLog())
        try:
            doc = orjson.loads(raw)
            if not isinstance(doc, dict) or not isinstance(doc.get("epochs"), list):
                raise ValueError("not an object with an 'epochs' list")
            members = doc.get("inSyncSlaves", [])
            if not isinstance(members, list) or not all(isinstance(m, int) for m in members):
                raise ValueError("'inSyncSlaves' is not a list of broker ids")
            return EpochState(validate_pairs(doc["epochs"]), bool(doc.get("slaveAttached", False)), frozenset(members))
        except (orjson.JSONDecodeError, ValueError) as exc:
            # Guessing here could make a master agree with a slave it diverged from: stop.
            raise ConfigError(f"{self.path}: unreadable replication epochs ({exc}); restore or remove it") from exc

    def save(self, state: EpochState) -> None:
        doc: dict[str, object] = {"epochs": state.epochs.pairs(), "slaveAttached": state.slave_attached}
        if state.in_sync_slaves:
            doc["inSyncSlaves"] = sorted(state.in_sync_slaves)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, orjson.dumps(doc))
