"""The window operators' snapshot codec.

Snapshots: `snapshot()` -> bytes is an .npz archive (numpy arrays only, loaded with
allow_pickle=False) whose `__header__` entry is UTF-8 JSON: format name, version, operator
kind, the plan's window and state fields (checked on restore), watermark and counters.
"""

from __future__ import annotations

import io
import json
import zipfile
from typing import Any

import numpy as np

from mangonel.errors import DataError

SNAPSHOT_FORMAT = "mangonel.window-state"
SNAPSHOT_VERSION = 1


def pack(header: dict[str, Any], arrays: dict[str, np.ndarray]) -> bytes:
    buffer = io.BytesIO()
    header_bytes = np.frombuffer(json.dumps(header, sort_keys=True).encode("utf-8"), np.uint8)
    np.savez(buffer, __header__=header_bytes, **arrays)
    return buffer.getvalue()


def unpack(data: bytes) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
        header = json.loads(arrays.pop("__header__").tobytes().decode("utf-8"))
    except (
        ValueError,
        OSError,
        KeyError,
        AttributeError,
        UnicodeDecodeError,
        EOFError,  # empty
        zipfile.BadZipFile,  # truncated or corrupt
    ) as error:
        raise DataError(f"not a mangonel window-operator snapshot ({error})") from error
    if header.get("format") != SNAPSHOT_FORMAT:
        raise DataError("not a mangonel window-operator snapshot")
    if header.get("version") != SNAPSHOT_VERSION:
        raise DataError(
            f"snapshot version {header.get('version')} is not supported "
            f"(this build reads version {SNAPSHOT_VERSION})"
        )
    return header, arrays
