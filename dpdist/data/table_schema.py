"""A table's declared public schema: a Frictionless Table Schema read, checked and applied to raw rows.

A private analysis needs columns whose meaning and scale are public, never read from the data: a
column's range, a text column's values, what fills a gap. The user declares them in a Table Schema
(https://specs.frictionlessdata.io/table-schema/), JSON of the form::

    {"fields": [
        {"name": "age", "type": "integer", "constraints": {"minimum": 18, "maximum": 90}, "fill": 45},
        {"name": "plan", "type": "string", "constraints": {"enum": ["basic", "plus"]}},
        {"name": "churn", "type": "string", "constraints": {"enum": ["no", "yes"], "required": true}}],
     "missingValues": ["", "NA"], "primaryKey": "id"}

Each record is mapped on its own (a public map: no statistic of the other records):

* ``number`` / ``integer`` fields with ``constraints.minimum`` and ``maximum``: (x - min) / (max - min),
  clipped to [0, 1];
* ``boolean`` fields: 1 for a ``trueValues`` string, 0 for a ``falseValues`` one (the spec's defaults);
* ``string`` fields with ``constraints.enum``: one 0/1 column per declared value and ``NAME=other``
  for any other value (a gap is in none of them);
* a gap (a value in ``missingValues``, schema-wide or the field's own; default ``[""]``): the field's
  ``fill`` (a dpdist property, in the field's raw units) or, for a text field without one, no column;
  ``constraints.required`` refuses a gap;
* the target (``target``, default the last field that is not the primary key): a ``string`` with an
  ``enum`` of two or more values (classes: codes follow the sorted names), or a number with its range
  (a regression target, mapped to [-1, 1]);
* the ``primaryKey`` field (one name) is no feature: predictions carry it to name their rows.

Bad input names where: the schema file (with the line and column of a JSON syntax error, the JSON path of
a schema error and the field), and the table file with the line and field of the first bad value (never
the value: the table holds private records).

Why not the ``frictionless`` package: on 2026-11-29 it installed 41 packages (86 MB) into a fresh
environment and took 0.7 s to import; this module needs the spec's few field properties, checked by a
JSON Schema (``jsonschema``, already installed with Prefect) of the subset dpdist reads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dpdist.exceptions import ParameterError

__all__ = ["TableSchema", "ingest_declared", "load_schema", "schema_from_dict"]

_NUMERIC = ("number", "integer")
_TRUE = ["true", "True", "TRUE", "1"]  # the Table Schema spec's defaults
_FALSE = ["false", "False", "FALSE", "0"]

# the subset of the Table Schema spec dpdist reads (other properties are allowed and ignored, as the spec says)
_SPEC: dict[str, Any] = {
    "type": "object",
    "required": ["fields"],
    "properties": {
        "fields": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/field"}},
        "missingValues": {"type": "array", "items": {"type": "string"}},
        "primaryKey": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 1}]},
        "target": {"type": "string"},
    },
    "$defs": {
        "field": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "type": {"enum": ["string", "number", "integer", "boolean"]},
                "missingValues": {"type": "array", "items": {"type": "string"}},
                "trueValues": {"type": "array", "items": {"type": "string"}},
                "falseValues": {"type": "array", "items": {"type": "string"}},
                "fill": {"type": ["number", "string", "boolean"]},
                "constraints": {
                    "type": "object",
                    "properties": {
                        "required": {"type": "boolean"},
                        "minimum": {"type": "number"},
                        "maximum": {"type": "number"},
                        "enum": {"type": "array", "minItems": 1, "uniqueItems": True},
                    },
                },
            },
        }
    },
}


@dataclass
class TableSchema:
    """A checked Table Schema: its fields, which of them is the target and which the rows' key.

    ``source`` names the schema where errors do (its file); ``spec`` is the JSON as declared, what a
    store and every released model record so that new rows are read exactly as the training rows."""

    spec: dict[str, Any]
    source: str = "schema"
    fields: list[dict[str, Any]] = field(init=False)
    target: str | None = field(init=False)
    key: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.fields = list(self.spec["fields"])
        key = self.spec.get("primaryKey")
        self.key = key[0] if isinstance(key, list) and key else key or None
        names = [f["name"] for f in self.fields]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise ParameterError(f"{self.source}: field names must be unique; {twice} appear twice")
        if self.key is not None and self.key not in names:
            raise ParameterError(f"{self.source}: primaryKey {self.key!r} is not one of its fields")
        target = self.spec.get("target")
        if target is None:
            rest = [n for n in names if n != self.key]
            target = rest[-1] if rest else None
        if target not in names or target == self.key:
            raise ParameterError(f"{self.source}: target {target!r} is not one of its fields (besides the key)")
        self.target = target
        for f in self.fields:
            self._check_field(f)
        if len(self.features) == 0:
            raise ParameterError(f"{self.source}: no feature field beside the target {target!r}")

    # ------------------------------------------------------------------ the declared fields

    def _check_field(self, f: dict[str, Any]) -> None:
        """Refuse a field whose map to columns is not declared: a number without its range, a text field
        without its values, a fill outside what the field can hold."""
        name, kind, c = f["name"], f.get("type", "string"), f.get("constraints", {})
        where = f"{self.source}: field {name!r}"
        if name == self.key:
            return
        if kind in _NUMERIC:
            lo, hi = c.get("minimum"), c.get("maximum")
            if lo is None or hi is None or not float(lo) < float(hi):
                raise ParameterError(
                    f"{where}: a numeric field ({kind}) needs its public range, constraints.minimum < "
                    "constraints.maximum (the values it is scaled by; never read from the data)"
                )
            if "fill" in f and (isinstance(f["fill"], (str, bool)) or not lo <= f["fill"] <= hi):
                raise ParameterError(f"{where}: fill must be a number within [minimum, maximum]")
        elif kind == "string":
            enum = c.get("enum")
            if not enum or not all(isinstance(v, str) for v in enum):
                raise ParameterError(
                    f"{where}: a string field needs its public values, constraints.enum (a list of strings): "
                    "one 0/1 column each, and one for any other value"
                )
            if "fill" in f and f["fill"] not in enum:
                raise ParameterError(f"{where}: fill must be one of its enum values")
            if name == self.target and len(enum) < 2:
                raise ParameterError(f"{where}: the target's enum must list at least two classes")
        elif kind == "boolean":
            if name == self.target:
                raise ParameterError(f"{where}: declare a yes/no target as a string with its two values in enum")
            if "fill" in f and not isinstance(f["fill"], bool):
                raise ParameterError(f"{where}: fill must be true or false")

    @property
    def features(self) -> list[dict[str, Any]]:
        """The feature fields, in order (neither the target nor the key)."""
        return [f for f in self.fields if f["name"] not in (self.target, self.key)]

    @property
    def target_field(self) -> dict[str, Any]:
        return next(f for f in self.fields if f["name"] == self.target)

    @property
    def task(self) -> str:
        """binary, multiclass (a text target, by its declared classes) or regression (a numeric one)."""
        kind = self.target_field.get("type", "string")
        if kind in _NUMERIC:
            return "regression"
        return "binary" if len(self.classes or []) == 2 else "multiclass"

    @property
    def classes(self) -> list[str] | None:
        """The target's declared classes, sorted (their codes 0, 1, ...), or None for a numeric target."""
        f = self.target_field
        return None if f.get("type", "string") in _NUMERIC else sorted(f["constraints"]["enum"])

    @property
    def feature_names(self) -> list[str]:
        """The design's column names: a numeric or boolean field's name; a text field's NAME=value columns."""
        out: list[str] = []
        for f in self.features:
            if f.get("type", "string") == "string":
                out += [f"{f['name']}={v}" for v in f["constraints"]["enum"]] + [f"{f['name']}=other"]
            else:
                out.append(f["name"])
        return out

    def target_range(self) -> tuple[float, float] | None:
        """A numeric target's declared (minimum, maximum), which map it to [-1, 1]; None for classes."""
        f = self.target_field
        if f.get("type", "string") not in _NUMERIC:
            return None
        return float(f["constraints"]["minimum"]), float(f["constraints"]["maximum"])

    # ------------------------------------------------------------------ applying it to raw rows

    def _missing(self, f: dict[str, Any]) -> list[str]:
        return list(f.get("missingValues", self.spec.get("missingValues", [""])))

    def read(self, path: str | os.PathLike[str], target: bool = True) -> tuple[np.ndarray, np.ndarray | None, Any]:
        """(the design X in [0, 1], the target codes or scaled values (None when ``target`` is False: new
        rows to predict, whose label column may be absent), the rows' key values or None) of a CSV file
        (plain or .gz/.bz2/.xz) read by the schema. Refused (naming the file, the line and the field): a
        declared column missing from the header, a value that is not of the field's type, a gap in a
        required field or one no fill covers."""
        frame = _read_text(path)
        where = str(path)
        names = [f["name"] for f in self.fields if target or f["name"] != self.target]
        absent = [n for n in names if n not in frame.columns]
        if absent:
            raise ParameterError(
                f"{where}:1: the header lacks the schema's field(s) {absent}; it has {list(frame.columns)[:20]}"
            )
        parts = [self._columns(f, frame[f["name"]], where) for f in self.features]
        X = np.hstack(parts) if parts else np.zeros((len(frame), 0))
        y = self._target(frame[self.target], where) if target else None
        keys = frame[self.key].to_numpy() if self.key is not None and self.key in frame.columns else None
        return X, y, keys

    def _gaps(self, f: dict[str, Any], values: Any, where: str) -> np.ndarray:
        """Where the field's values are gaps; a gap in a required field is refused."""
        gaps: np.ndarray = values.isin(self._missing(f)).to_numpy()
        if gaps.any() and f.get("constraints", {}).get("required"):
            raise ParameterError(f"{where}:{_line(gaps)}: field {f['name']!r} is required and has no value")
        return gaps

    def _columns(self, f: dict[str, Any], values: Any, where: str) -> np.ndarray:
        """One field's design columns (n x 1, or n x (K + 1) for a text field)."""
        gaps = self._gaps(f, values, where)
        kind, name = f.get("type", "string"), f["name"]
        if kind == "string":
            enum = list(f["constraints"]["enum"])
            text = values.where(~gaps, f["fill"]) if "fill" in f else values
            filled = ~gaps | ("fill" in f)
            cols = [(text == v).to_numpy() & filled for v in enum]
            cols.append(~text.isin(enum).to_numpy() & filled)
            return np.column_stack(cols).astype(np.float64)
        if gaps.any() and "fill" not in f:
            raise ParameterError(
                f"{where}:{_line(gaps)}: field {name!r} has a gap and the schema declares no fill for it "
                '(add "fill": a public value in its raw units, or mark the field required)'
            )
        if kind == "boolean":
            true, false = f.get("trueValues", _TRUE), f.get("falseValues", _FALSE)
            bad = ~gaps & ~values.isin(true + false).to_numpy()
            if bad.any():
                raise ParameterError(f"{where}:{_line(bad)}: field {name!r}: not one of its true or false values")
            x = np.where(gaps, float(bool(f.get("fill", False))), values.isin(true).to_numpy().astype(np.float64))
            return x[:, None]
        x = _numbers(values, gaps, f, where)
        lo, hi = float(f["constraints"]["minimum"]), float(f["constraints"]["maximum"])
        x = np.where(gaps, float(f.get("fill", lo)), x)
        return np.clip((x - lo) / (hi - lo), 0.0, 1.0)[:, None]

    def _target(self, values: Any, where: str) -> np.ndarray:
        """The target: class codes in sorted-name order, or a number mapped to [-1, 1] by its range. A gap
        or (for classes) a value outside the declared ones is refused."""
        f = self.target_field
        gaps = values.isin(self._missing(f)).to_numpy()
        if gaps.any():
            raise ParameterError(f"{where}:{_line(gaps)}: the target {f['name']!r} has no value")
        bounds = self.target_range()
        if bounds is None:
            classes = self.classes or []
            bad = ~values.isin(classes).to_numpy()
            if bad.any():
                raise ParameterError(
                    f"{where}:{_line(bad)}: the target {f['name']!r} holds a label outside its declared classes "
                    f"{classes}"
                )
            codes: np.ndarray = np.searchsorted(np.asarray(classes, dtype=object), values.to_numpy())
            return codes.astype(np.float64)
        lo, hi = bounds
        x = _numbers(values, gaps, f, where)
        return np.clip(2.0 * (x - lo) / (hi - lo) - 1.0, -1.0, 1.0)

    def target_values(self, scaled: np.ndarray) -> np.ndarray:
        """A regression model's outputs in [-1, 1] back in the target's raw units."""
        bounds = self.target_range()
        if bounds is None:
            raise ParameterError(f"{self.source}: the target {self.target!r} is a class, not a number")
        lo, hi = bounds
        return lo + (np.asarray(scaled, dtype=np.float64) + 1.0) * (hi - lo) / 2.0


def _line(mask: np.ndarray) -> int:
    """The file line of the first flagged data row (line 1 is the header): where to look, as a parser names a
    line; no value and no count of the data."""
    return int(np.flatnonzero(mask)[0]) + 2


def _numbers(values: Any, gaps: np.ndarray, f: dict[str, Any], where: str) -> np.ndarray:
    """A numeric field's values as floats (gaps NaN); a value that is not a finite number (or, for an integer
    field, not a whole one) is refused naming its line."""
    import pandas as pd

    x: np.ndarray = pd.to_numeric(values.where(~gaps, None), errors="coerce").to_numpy(dtype=np.float64)
    bad = ~gaps & ~np.isfinite(x)
    if f.get("type") == "integer":
        bad |= ~gaps & np.isfinite(x) & (x != np.round(x))
    if bad.any():
        raise ParameterError(f"{where}:{_line(bad)}: field {f['name']!r}: not a finite {f.get('type')}")
    return x


def _read_text(path: str | os.PathLike[str]) -> Any:
    """A CSV file's cells as text (plain or compressed; pandas' own NaN guessing off: the schema says what a
    gap is). Refused naming the file: absent, empty, not UTF-8, not a well-formed table."""
    import pandas as pd

    from dpdist.data.tables import _not_utf8, _unreadable

    p = Path(path)
    if not p.is_file():
        raise ParameterError(f"input file {p} does not exist")
    try:
        return pd.read_csv(p, dtype=str, keep_default_na=False, na_filter=False)
    except UnicodeDecodeError:
        from dpdist.data.svmlight import open_text

        with open_text(p) as fh:
            raise _not_utf8(fh.read(), str(p)) from None
    except Exception as e:
        refusal = _unreadable(p, e)
        if refusal is None:
            raise
        raise refusal from None


def schema_from_dict(spec: dict[str, Any], source: str = "schema") -> TableSchema:
    """A Table Schema given as a dict (a store's or a model's record of it), checked as ``load_schema`` does."""
    import jsonschema

    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(_SPEC).iter_errors(spec))
    if error is not None:
        path = list(error.absolute_path)
        at = "/".join(str(p) for p in path) or "(top level)"
        named = ""
        if len(path) >= 2 and path[0] == "fields" and isinstance(path[1], int):
            f = spec["fields"][path[1]]
            named = f" (field {f.get('name')!r})" if isinstance(f, dict) and "name" in f else ""
        raise ParameterError(f"{source}: {at}{named}: {error.message} (a Frictionless Table Schema)")
    return TableSchema(spec, source)


def load_schema(path: str | os.PathLike[str]) -> TableSchema:
    """Read and check a Table Schema JSON file; a ParameterError names the file, and the line and column of a
    JSON syntax error or the JSON path and field of a schema error."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ParameterError(f"--schema {p}: no such file") from None
    except UnicodeDecodeError:
        raise ParameterError(f"--schema {p}: not UTF-8 text") from None
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParameterError(f"{p}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    if not isinstance(spec, dict):
        raise ParameterError(f"{p}: a Table Schema is a JSON object with a 'fields' list")
    return schema_from_dict(spec, str(p))


def ingest_declared(
    src: str | os.PathLike[str],
    out: str | os.PathLike[str],
    schema_path: str | os.PathLike[str],
    *,
    force: bool = False,
    name: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """A CSV table read by its declared Table Schema, written as a store that records the schema (its
    metadata returned): every column a public map of the record's own values."""
    from dpdist.data.store import write_store

    declared = load_schema(schema_path)
    X, y, _ = declared.read(src)
    assert y is not None  # (read with its target)
    classes = declared.classes
    meta = {
        "classes": classes,
        "feature_names": declared.feature_names,
        "source": str(Path(src).resolve()),
        "table_notes": {"table_schema": True},
        "table_schema": declared.spec,
        "name": name,
        "feature_schema": "declared",
    }
    return write_store(
        out,
        X,
        y,
        task=declared.task,
        force=force,
        metadata=meta,
        labels=[float(i) for i in range(len(classes))] if classes else None,
        progress=progress,
    )
