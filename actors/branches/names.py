"""Names and paths, checked at the boundary, and where each record lives in the KV.

Rules (lakeFS's, with explicit limits where lakeFS has none):
- repository: 3-63 characters of `[a-z0-9-]`, starting with a letter or digit;
- branch: `\\w[-\\w]*` in ASCII (letters, digits, `_`, `-`), at most 256 characters;
- commit id: 64 lowercase hex digits (a content address);
- object path: a non-empty str (or UTF-8 bytes) of at most `MAX_PATH_BYTES` bytes in
  UTF-8, with no NUL. Paths order by their UTF-8 bytes, which is the order of Python's
  str comparison, so every sorted structure here compares plain strs.

KV layout, all under `ROOT`: `r/<repo>` the repository, `b/<repo>/<branch>` a branch,
`c/<repo>/<commit>` a commit, `s/<repo>/<token>/<path>` a staged entry.
"""

from __future__ import annotations

import re
from typing import Final

from sediment.actors.branches.errors import InvalidName, InvalidPath

MAX_PATH_BYTES: Final = 1024  # S3's key limit
MAX_BRANCH_CHARS: Final = 256
ROOT: Final = b"/sediment/branches/"

_REPO = re.compile(r"[a-z0-9][a-z0-9-]{2,62}")
_BRANCH = re.compile(r"[A-Za-z0-9_][-A-Za-z0-9_]*")
_COMMIT = re.compile(r"[0-9a-f]{64}")
_TOKEN = re.compile(r"[0-9a-f]{32}")


def check_repo(name: object) -> str:
    if not isinstance(name, str) or _REPO.fullmatch(name) is None:
        raise InvalidName(f"repository name must match [a-z0-9][a-z0-9-]{{2,62}}: {name!r:.80}")
    return name


def check_branch(name: object) -> str:
    if (not isinstance(name, str) or len(name) > MAX_BRANCH_CHARS
            or _BRANCH.fullmatch(name) is None):
        raise InvalidName(f"branch name must match \\w[-\\w]* (ASCII, at most "
                          f"{MAX_BRANCH_CHARS} characters): {name!r:.80}")
    return name


def is_commit_id(ref: str) -> bool:
    return _COMMIT.fullmatch(ref) is not None


def check_ref(ref: object) -> str:
    """A branch name or a commit id."""
    if isinstance(ref, str) and is_commit_id(ref):
        return ref
    try:
        return check_branch(ref)
    except InvalidName:
        raise InvalidName(f"a ref is a branch name or a 64-hex commit id: {ref!r:.80}") from None


def check_token(token: object) -> str:
    if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
        raise InvalidName(f"a staging token is 32 lowercase hex digits: {token!r:.80}")
    return token


def check_path(path: object) -> str:
    """The path as a str: InvalidPath if empty, too long, not UTF-8 or with a NUL."""
    if isinstance(path, bytes | bytearray):
        raw = bytes(path)
        try:
            path = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise InvalidPath(f"path is not UTF-8: {raw!r:.80}") from err
    if not isinstance(path, str):
        raise InvalidPath(f"path must be str or UTF-8 bytes, got {type(path).__name__}")
    if not path:
        raise InvalidPath("path is empty")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError as err:  # a lone surrogate
        raise InvalidPath(f"path is not valid Unicode: {path!r:.80}") from err
    if size > MAX_PATH_BYTES:
        raise InvalidPath(f"path is {size} bytes in UTF-8, more than {MAX_PATH_BYTES}")
    if "\0" in path:
        raise InvalidPath("path contains NUL")
    return path


def check_prefix(prefix: object) -> str:
    """A listing prefix: like a path, but may be empty."""
    if prefix in ("", b""):
        return ""
    return check_path(prefix)


# ---- KV keys ------------------------------------------------------------------------------


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key starting with `prefix` (etcd's GetPrefixRangeEnd)."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def repo_key(repo: str) -> bytes:
    return ROOT + b"r/" + repo.encode()


def repos_prefix() -> bytes:
    return ROOT + b"r/"


def branch_key(repo: str, branch: str) -> bytes:
    return ROOT + b"b/" + repo.encode() + b"/" + branch.encode()


def branches_prefix(repo: str) -> bytes:
    return ROOT + b"b/" + repo.encode() + b"/"


def commit_key(repo: str, commit_id: str) -> bytes:
    return ROOT + b"c/" + repo.encode() + b"/" + commit_id.encode()


def staging_repo_prefix(repo: str) -> bytes:
    return ROOT + b"s/" + repo.encode() + b"/"


def staging_prefix(repo: str, token: str) -> bytes:
    return staging_repo_prefix(repo) + token.encode() + b"/"


def staging_key(repo: str, token: str, path: str) -> bytes:
    return staging_prefix(repo, token) + path.encode("utf-8")


def path_of(repo: str, token: str, key: bytes) -> str:
    """The path of staged key `key` (which must be under the token's prefix)."""
    return key[len(staging_prefix(repo, token)):].decode("utf-8")


def token_of(repo: str, key: bytes) -> str | None:
    """The staging token a key under the repository's staging prefix belongs to."""
    rest = key[len(staging_repo_prefix(repo)):]
    token, sep, _ = rest.partition(b"/")
    return token.decode() if sep and _TOKEN.fullmatch(token.decode(errors="replace")) else None


__all__ = [
    "MAX_BRANCH_CHARS",
    "MAX_PATH_BYTES",
    "ROOT",
    "branch_key",
    "branches_prefix",
    "check_branch",
    "check_path",
    "check_prefix",
    "check_ref",
    "check_repo",
    "check_token",
    "commit_key",
    "is_commit_id",
    "path_of",
    "prefix_end",
    "repo_key",
    "repos_prefix",
    "staging_key",
    "staging_prefix",
    "staging_repo_prefix",
    "token_of",
]
