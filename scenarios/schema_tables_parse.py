"""Reading a scenario file with `cluster.tables` (`schema_tables.py`).

`schema.loads` and `schema.load_dict` come here: `schema_parse`'s reading and
validation, with the validator's `cluster` taking one key more, `tables`, read by
`schema_tables.read_tables` with the same primitives (so errors have their place in
the file). `schema_parse.py` itself stays unaware of the tables tier.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sediment.scenarios import schema_parse as sp
from sediment.scenarios.schema import Cluster, Path_, Scenario
from sediment.scenarios.schema_tables import read_tables
from sediment.scenarios.schema_yaml import Doc, read_yaml

TABLES_KEY = "tables"


class _TablesValidator(sp._Validator):  # noqa: SLF001 - the one validator, one key more
    def cluster(self, v: object, path: Path_) -> Cluster:
        if not isinstance(v, dict) or TABLES_KEY not in v:
            return super().cluster(v, path)
        rest = {k: x for k, x in v.items() if k != TABLES_KEY}
        cluster = super().cluster(rest, path)
        return replace(cluster, tables=read_tables(self, v[TABLES_KEY], (*path, TABLES_KEY)))


def parse_text(text: str, source: str) -> Scenario:
    """A scenario from YAML text (`schema.loads`)."""
    doc, data = read_yaml(text, source)
    return _TablesValidator(doc).scenario(data)


def parse_data(data: Mapping[str, Any], source: str) -> Scenario:
    """A scenario from plain data (`schema.load_dict`)."""
    return _TablesValidator(Doc(source)).scenario(data)


__all__ = ["parse_data", "parse_text"]
