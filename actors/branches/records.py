"""Repository and commit records (pure): their fields, their KV encoding, and the
content address of a commit.

A commit is immutable: parents, message, metadata, committer, creation date,
generation and its metarange. Its id is the SHA-256 of its canonical encoding (lakeFS
hashes the commit the same way), so writing a commit twice writes the same record
and a commit id names exactly one content.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sediment.actors.branches.errors import CorruptRecord, InvalidInput
from sediment.actors.branches.names import check_branch, is_commit_id

MAX_MESSAGE_CHARS: Final = 64 * 1024
MAX_COMMIT_METADATA_BYTES: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class Repository:
    default_branch: str
    creation_date: float


@dataclass(frozen=True, slots=True)
class Commit:
    parents: tuple[str, ...]
    message: str
    metarange: str
    committer: str = ""
    creation_date: float = 0.0
    metadata: tuple[tuple[str, str], ...] = ()
    generation: int = 1

    @property
    def id(self) -> str:
        return hashlib.sha256(encode_commit(self)).hexdigest()


def check_commit_fields(message: object, metadata: Mapping[str, str] | None,
                        committer: object) -> tuple[str, tuple[tuple[str, str], ...], str]:
    """A commit's user fields, checked: InvalidInput before anything is written."""
    if not isinstance(message, str) or len(message) > MAX_MESSAGE_CHARS:
        raise InvalidInput(f"message must be a str of at most {MAX_MESSAGE_CHARS} characters")
    if not isinstance(committer, str) or len(committer) > 256:
        raise InvalidInput("committer must be a str of at most 256 characters")
    pairs: list[tuple[str, str]] = []
    if metadata is not None:
        if not isinstance(metadata, Mapping):
            raise InvalidInput("metadata must be a mapping of str to str")
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str) or not k:
                raise InvalidInput(f"commit metadata must map non-empty str to str: {k!r:.40}")
            pairs.append((k, v))
    try:
        size = sum(len(k.encode()) + len(v.encode()) for k, v in pairs)
        message.encode()
        committer.encode()
    except UnicodeEncodeError as err:
        raise InvalidInput("commit fields must be valid Unicode") from err
    if size > MAX_COMMIT_METADATA_BYTES:
        raise InvalidInput(f"commit metadata is {size} bytes, more than "
                           f"{MAX_COMMIT_METADATA_BYTES}")
    return message, tuple(sorted(pairs)), committer


def _dumps(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


def encode_commit(c: Commit) -> bytes:
    return _dumps({"parents": list(c.parents), "message": c.message, "metarange": c.metarange,
                   "committer": c.committer, "date": c.creation_date,
                   "metadata": dict(c.metadata), "generation": c.generation})


def decode_commit(value: bytes, commit_id: str | None = None) -> Commit:
    """A commit record back; CorruptRecord if it does not decode or (with `commit_id`)
    is not the commit that id names."""
    try:
        doc = json.loads(value.decode())
        if not isinstance(doc, dict):
            raise ValueError("not an object")
        parents, meta = doc["parents"], doc["metadata"]
        if not isinstance(parents, list) or not all(
                isinstance(p, str) and is_commit_id(p) for p in parents):
            raise ValueError("bad parents")
        if not isinstance(meta, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise ValueError("bad metadata")
        date, generation = doc["date"], doc["generation"]
        if not isinstance(date, int | float) or not math.isfinite(date):
            raise ValueError("bad date")
        if not isinstance(generation, int) or generation < 1:
            raise ValueError("bad generation")
        for name in ("message", "metarange", "committer"):
            if not isinstance(doc[name], str):
                raise ValueError(f"bad {name}")
        commit = Commit(tuple(parents), doc["message"], doc["metarange"], doc["committer"],
                        float(date), tuple(sorted(meta.items())), generation)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise CorruptRecord(f"commit record does not decode: {err}") from None
    if commit_id is not None and commit.id != commit_id:
        raise CorruptRecord(f"commit record under {commit_id} holds commit {commit.id}")
    return commit


def encode_repository(r: Repository) -> bytes:
    return _dumps({"default_branch": r.default_branch, "date": r.creation_date})


def decode_repository(value: bytes) -> Repository:
    try:
        doc = json.loads(value.decode())
        branch, date = doc["default_branch"], doc["date"]
        check_branch(branch)
        if not isinstance(date, int | float) or not math.isfinite(date):
            raise ValueError("bad date")
        return Repository(branch, float(date))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise CorruptRecord(f"repository record does not decode: {err}") from None


__all__ = [
    "MAX_COMMIT_METADATA_BYTES",
    "MAX_MESSAGE_CHARS",
    "Commit",
    "Repository",
    "check_commit_fields",
    "decode_commit",
    "decode_repository",
    "encode_commit",
    "encode_repository",
]
