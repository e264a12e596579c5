"""A message body as a person can read it: text (UTF-8, undecodable bytes marked), hex
(offset, bytes, ASCII, like ``hexdump -C``) and, when the body parses, indented JSON. Only
the first ``limit`` bytes are shown: a console must not ship a 4 MiB body to a browser."""

from __future__ import annotations

import json
from dataclasses import dataclass

PREVIEW_LIMIT = 64 * 1024


@dataclass(frozen=True, slots=True)
class BodyPreview:
    size: int
    shown: int
    text: str
    hex: str
    json: str | None  # None: the body is not JSON
    binary: bool  # not valid UTF-8

    @property
    def truncated(self) -> bool:
        return self.shown < self.size


def hex_dump(data: bytes) -> str:
    lines = []
    for at in range(0, len(data), 16):
        chunk = data[at : at + 16]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        ascii_part = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{at:08x}  {hex_part:<47}  |{ascii_part}|")
    return "\n".join(lines)


def preview(body: bytes, limit: int = PREVIEW_LIMIT) -> BodyPreview:
    shown = body[:limit]
    try:
        decoded = shown.decode("utf-8")
        binary = False
    except UnicodeDecodeError:
        decoded = shown.decode("utf-8", errors="replace")
        binary = True
    pretty: str | None = None
    if not binary and len(body) <= limit:
        try:
            pretty = json.dumps(json.loads(decoded), indent=2, ensure_ascii=False, sort_keys=False)
        except ValueError:
            pretty = None
    return BodyPreview(len(body), len(shown), decoded, hex_dump(shown[: min(limit, 4096)]), pretty, binary)
