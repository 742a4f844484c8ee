"""Log storage records: round trip, torn tails vs corrupt records, raw copies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sediment.actors.log.storage import records
from sediment.actors.log.storage.records import (
    ENTRY,
    HEADER_SIZE,
    SPARSE,
    CorruptRecord,
    Entry,
    TornTail,
    decode,
    decode_raw,
    encode,
    encode_entry,
    encode_group,
    iter_records,
    raw_is_valid,
)

I64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
IDX = st.integers(min_value=0, max_value=2**63 - 1)


@settings(max_examples=200, deadline=None)
@given(
    index=IDX,
    term=IDX,
    ts=I64,
    payload=st.binary(max_size=300),
    group=st.text(max_size=20),
    prev=st.one_of(st.none(), st.integers(min_value=0, max_value=2**62)),
)
def test_round_trip(
    index: int, term: int, ts: int, payload: bytes, group: str, prev: int | None
) -> None:
    raw = encode_entry(Entry(index, term, ts, payload), group=group.encode(), prev_index=prev)
    rec = decode(raw)
    assert rec.entry == Entry(index, term, ts, payload)
    assert rec.group == group
    assert rec.size == len(raw)
    assert rec.kind == (ENTRY if prev is None else SPARSE)
    assert rec.prev_index == (-1 if prev is None else prev)
    assert raw_is_valid(raw)
    assert decode_raw(raw).entry == rec.entry


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=64), min_size=1, max_size=20))
def test_iter_records_reads_a_stream_back(payloads: list[bytes]) -> None:
    buf = b"".join(encode(i + 1, 1, 0, p, group=b"g") for i, p in enumerate(payloads))
    got = [r.payload for r in iter_records(buf)]
    assert got == payloads


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(max_size=8), st.one_of(st.none(), st.integers(0, 99)), st.binary(max_size=50)
        ),
        max_size=10,
    )
)
def test_encode_group_matches_encode(items: list[tuple[str, int | None, bytes]]) -> None:
    import zlib

    for group, _prev, _payload in items[:1]:
        gb = group.encode()
        batch = []
        singles = []
        for k, (_g, prev, payload) in enumerate(items):
            entry = Entry(100 + k, 3, -k, payload)
            batch.append((-1 if prev is None else prev, entry))
            singles.append(encode_entry(entry, group=gb, prev_index=prev))
        assert b"".join(encode_group(gb, zlib.crc32(gb), batch)) == b"".join(singles)


def _stream(n: int) -> tuple[bytes, int]:
    """n records; returns the bytes and the offset of the last one."""
    parts = [encode(i + 1, 1, 7, bytes([i]) * 40, group=b"grp") for i in range(n)]
    return b"".join(parts), sum(len(p) for p in parts[:-1])


def test_every_truncation_of_the_last_record_is_a_torn_tail() -> None:
    buf, last = _stream(3)
    for cut in range(last + 1, len(buf)):
        recs: list[int] = []
        with pytest.raises(TornTail) as err:
            for rec in iter_records(buf[:cut], source="f"):
                recs.append(rec.index)
        assert recs == [1, 2]
        assert err.value.offset == last


def test_zero_filled_tail_is_torn() -> None:
    buf, _ = _stream(2)
    with pytest.raises(TornTail) as err:
        list(iter_records(buf + bytes(100)))
    assert err.value.offset == len(buf)


def test_partial_header_followed_by_zeros_is_torn() -> None:
    buf, last = _stream(2)
    damaged = buf[: last + 10] + bytes(len(buf) - last - 10)
    with pytest.raises(TornTail):
        list(iter_records(damaged))


def test_crc_mismatch_in_the_middle_is_corrupt_with_offset() -> None:
    buf, _ = _stream(3)
    first_len = len(encode(1, 1, 7, bytes([0]) * 40, group=b"grp"))
    damaged = bytearray(buf)
    damaged[first_len + HEADER_SIZE + 5] ^= 0xFF  # payload byte of record 2
    with pytest.raises(CorruptRecord) as err:
        list(iter_records(bytes(damaged), source="wal-file"))
    assert err.value.offset == first_len
    assert err.value.source == "wal-file"
    assert not isinstance(err.value, TornTail)


def test_damaged_header_in_the_middle_is_corrupt() -> None:
    buf, _ = _stream(3)
    damaged = bytearray(buf)
    damaged[3] ^= 0x01  # group length of record 1: the header CRC catches it
    with pytest.raises(CorruptRecord) as err:
        list(iter_records(bytes(damaged)))
    assert err.value.offset == 0


def test_crc_mismatch_in_the_last_record_is_a_torn_write() -> None:
    # The append of the last record did not finish (a sector of it never reached disk):
    # nothing follows it, so it is a torn tail, not damage to durable data.
    buf, last = _stream(3)
    damaged = bytearray(buf)
    damaged[-6] ^= 0xFF
    with pytest.raises(TornTail) as err:
        list(iter_records(bytes(damaged)))
    assert err.value.offset == last


def test_decode_raw_rejects_trailing_bytes_and_damage() -> None:
    raw = encode(5, 2, 0, b"abc")
    with pytest.raises(CorruptRecord):
        decode_raw(raw + b"x")
    with pytest.raises(CorruptRecord):
        decode_raw(raw[:-1])
    bad = bytearray(raw)
    bad[-1] ^= 1
    assert not raw_is_valid(bytes(bad))
    assert records.decode_raw(raw).index == 5
