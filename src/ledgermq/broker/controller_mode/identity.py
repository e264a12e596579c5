"""The broker's controller-assigned identity on disk, in RocketMQ 5's files and format.

``<storePathRootDir>/brokerIdentity`` holds ``cluster#brokerName#brokerId#registerCheckCode``
once the controller granted the id (RocketMQ writes the first three fields and reads only
those; the fourth, ours, lets a broker apply again for the same id with the same code when
the controller lost its registration). ``brokerIdentity-temp`` holds the id applied for
and the registerCheckCode before the controller answered, so a broker that crashes between
asking and being answered asks for the same id with the same code again (an id granted to
it is then granted again, not to somebody else). Both are replaced atomically.

The registerCheckCode is ``<brokerAddress>;<milliseconds>`` as RocketMQ writes it: it tells
this broker's disk from another broker's that asks for the same id.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ledgermq.atomic_file import write_atomic
from ledgermq.errors import ConfigError

__all__ = ["BrokerIdentity", "IdentityFiles"]

FILE_NAME = "brokerIdentity"
TEMP_SUFFIX = "-temp"


@dataclass(frozen=True, slots=True)
class BrokerIdentity:
    cluster_name: str
    broker_name: str
    broker_id: int
    register_check_code: str = ""

    def encode(self) -> str:
        fields = [self.cluster_name, self.broker_name, str(self.broker_id)]
        if self.register_check_code:
            fields.append(self.register_check_code)
        return "#".join(fields)

    @classmethod
    def decode(cls, text: str, path: Path) -> BrokerIdentity:
        parts = text.strip().split("#")
        if len(parts) < 3 or not parts[0] or not parts[1] or not parts[2].isdigit():
            raise ConfigError(f"{path}: {text.strip()!r} is not cluster#brokerName#brokerId[#registerCheckCode]")
        return cls(parts[0], parts[1], int(parts[2]), "#".join(parts[3:]))


class IdentityFiles:
    def __init__(self, store_root: str | Path) -> None:
        self.path = Path(store_root) / FILE_NAME
        self.temp_path = Path(store_root) / (FILE_NAME + TEMP_SUFFIX)

    def load(self) -> BrokerIdentity | None:
        return self._read(self.path)

    def load_temp(self) -> BrokerIdentity | None:
        found = self._read(self.temp_path)
        if found is not None and not found.register_check_code:
            raise ConfigError(f"{self.temp_path}: no registerCheckCode; remove the file to apply for a new id")
        return found

    def save_temp(self, identity: BrokerIdentity) -> None:
        write_atomic(self.temp_path, identity.encode().encode())

    def commit(self, identity: BrokerIdentity) -> None:
        """The controller granted ``identity``: keep it and forget the application."""
        write_atomic(self.path, identity.encode().encode())
        self.temp_path.unlink(missing_ok=True)

    @staticmethod
    def _read(path: Path) -> BrokerIdentity | None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return None
        return BrokerIdentity.decode(text, path)

    def check_matches(self, identity: BrokerIdentity, cluster_name: str, broker_name: str) -> None:
        """A store is one group's replica: refuse to serve another group with it (RocketMQ's
        checkMetadataValid)."""
        if identity.cluster_name != cluster_name or identity.broker_name != broker_name:
            raise ConfigError(
                f"{self.path} says this store is broker {identity.broker_id} of {identity.cluster_name}/"
                f"{identity.broker_name}, but the config names {cluster_name}/{broker_name}: use the store of "
                "that group, or another storePathRootDir"
            )
