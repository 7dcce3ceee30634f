"""Schema drift: rows that no longer match the stream's schema (spec part 2 fixes each row's
fields; a vendor adds fields without notice, and a target drops what SCHEMA does not declare).

- A field the schema does not declare: one WARNING per stream and field. `schema_drift` then
  decides: `include` (default) sends the stream's SCHEMA again with the field added (nullable,
  typed from its first non-null value) before the first record that carries it, so SQL targets
  add the column; `drop` removes it from the records; `fail` stops the run.
- A declared field that never arrived in a stream that emitted records: one WARNING per
  stream at the sync's end.
- A value whose JSON type contradicts the schema (a string where an integer is declared; a
  boolean is no integer) stops the run with one line. Null passes for every field: a missing
  value, which a nullable column holds, not a contradicting type.

`check_row` runs for every row (GuestDataStream.post_process): the common case is one set
lookup of the row's field names and value types; a shape not seen yet takes the slow path.
"""

from __future__ import annotations

import copy
from collections.abc import Container, Iterable
from typing import TYPE_CHECKING, Any

from singer_sdk.exceptions import FatalAPIError
from singer_sdk.helpers._catalog import get_selected_schema

if TYPE_CHECKING:
    from singer_sdk import Stream

NONE_TYPE = type(None)
# JSON Schema type -> the Python types orjson parses it into (bool is not an int here).
PYTHON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (NONE_TYPE,),
}
JSON_TYPE_NAMES: dict[type, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    dict: "object",
    list: "array",
    NONE_TYPE: "null",
}
_WATCH_ATTRIBUTE = "_schema_watch"
SIGNATURES_KEPT = 4096  # per stream; rows of other shapes still pass, on the slow path


class SchemaDriftError(FatalAPIError):
    """Rows the schema cannot describe; the tap ends the run with this one line."""


class _AnyType:
    """The allowed types of a property that declares none (e.g. `{}`): everything."""

    def __contains__(self, item: object) -> bool:
        return True


ANY_TYPE = _AnyType()


def allowed_types(property_schema: dict[str, Any]) -> Container[type]:
    """The exact Python types a property's values may have; null is always allowed."""
    declared = property_schema.get("type")
    if declared is None:
        return ANY_TYPE
    names = [declared] if isinstance(declared, str) else list(declared)
    if not set(names) <= PYTHON_TYPES.keys():
        return ANY_TYPE  # not a JSON Schema type this check knows: the target decides
    types = [NONE_TYPE, *(python_type for name in names for python_type in PYTHON_TYPES[name])]
    return tuple(dict.fromkeys(types))


def conforms(value: Any, types: Container[type]) -> bool:
    """Slow path: a float with an integral value (3.0) is an integer in JSON."""
    return type(value) is float and value.is_integer() and int in types


def type_name(value: Any) -> str:
    return JSON_TYPE_NAMES.get(type(value), type(value).__name__)


class SchemaWatch:
    """What one stream's rows showed during one run, against its schema."""

    def __init__(self, stream: Stream, mode: str) -> None:
        self.stream = stream
        self.mode = mode  # schema_drift: include, drop or fail
        self.active = stream.selected  # an unselected parent's rows are never written
        properties = stream.effective_schema.get("properties") or {}
        mask = stream.mask  # a deselected field is never written: any value passes
        self.allowed: dict[str, Container[type]] = {
            name: allowed_types(schema) if mask[("properties", name)] else ANY_TYPE
            for name, schema in properties.items()
        }
        self.declared_types = {name: schema.get("type") for name, schema in properties.items()}
        self.unseen: set[str] = set(properties)  # declared fields no row has carried yet
        self.conforming: set[tuple[Any, ...]] = set()  # row signatures checked and found fine
        self.records = 0
        self.warned: set[str] = set()

    def check(self, row: dict[str, Any]) -> None:
        """The hot path: a row's field names and value types as one tuple, looked up among
        those already found to conform (a few per stream: nullable fields vary)."""
        if not self.active:
            return
        self.records += 1
        signature = (*row, *map(type, row.values()))
        if signature not in self.conforming:
            self.inspect(row, signature)

    def inspect(self, row: dict[str, Any], signature: tuple[Any, ...]) -> None:
        """The slow path: undeclared fields first (which may declare them), then the types."""
        undeclared = [name for name in row if name not in self.allowed]
        for name in undeclared:
            self.undeclared(row, name)
        exact = True
        for name, value in row.items():
            types = self.allowed[name]
            if type(value) in types:
                continue
            exact = False  # e.g. 3.0 for an integer: fine, but not for every float
            if not conforms(value, types):
                raise SchemaDriftError(
                    f"{self.stream.name}: record {self.identify(row)} has {name}={value!r:.60} "
                    f"({type_name(value)}) where the schema declares {self.expected(name)}: "
                    "the API changed the field's type, which the target's column cannot follow. "
                    "Deselect the field in the catalog to sync without it"
                )
        if self.unseen:
            self.unseen.difference_update(row)
        if exact and not undeclared and len(self.conforming) < SIGNATURES_KEPT:
            self.conforming.add(signature)  # the same names and types conform next time

    def undeclared(self, row: dict[str, Any], name: str) -> None:
        stream, value = self.stream.name, row[name]
        if self.mode == "fail":
            raise SchemaDriftError(
                f"{stream}: the API sent field {name!r}, which the schema does not declare "
                f"(record {self.identify(row)}); schema_drift=fail stops the run. Set "
                "schema_drift=include to load it as a new column, or drop to leave it out"
            )
        if name not in self.warned:
            self.warned.add(name)
            outcome = (
                "dropped from the records (schema_drift=drop)"
                if self.mode == "drop"
                else "the stream's SCHEMA is sent again with it, so targets add the column "
                "(schema_drift=include)"
            )
            self.stream.logger.warning(
                "Schema drift: %s: the API sends field %r, which the schema does not declare; %s",
                stream,
                name,
                outcome,
            )
        if self.mode == "drop" or value is None:
            del row[name]  # include: a null tells no type; declared at its first value
            return
        self.declare(name, {"type": [type_name(value), "null"]})

    def declare(self, name: str, property_schema: dict[str, Any]) -> None:
        """Add the property and send the stream's SCHEMA again, before the record that
        carries it is written (the SDK writes a record right after post_process)."""
        send_schema_with(self.stream, name, property_schema)
        self.allowed[name] = allowed_types(property_schema)
        self.declared_types[name] = property_schema["type"]
        self.stream.logger.info(
            "Schema drift: %s: SCHEMA sent again with %r (%s)",
            self.stream.name,
            name,
            " or ".join(property_schema["type"]),
        )

    def expected(self, name: str) -> str:
        declared = self.declared_types.get(name)
        names = [declared] if isinstance(declared, str) else list(declared or [])
        return " or ".join(names)

    def identify(self, row: dict[str, Any]) -> str:
        keys = list(self.stream.primary_keys or ()) or ["id"]
        return ", ".join(f"{key}={row.get(key)!r}" for key in keys)

    def report_missing(self) -> None:
        """At the sync's end: declared fields no emitted row carried."""
        if not self.active or not self.records or not self.unseen:
            return
        self.stream.logger.warning(
            "Schema drift: %s: declared field(s) %s never arrived in %s records; the API may "
            "have stopped sending them (their columns stay empty)",
            self.stream.name,
            ", ".join(sorted(self.unseen)),
            f"{self.records:,}",
        )


def send_schema_with(stream: Stream, name: str, property_schema: dict[str, Any]) -> None:
    """The stream's schema with one property more, through the stream maps, written now.

    SDK internals: the stream maps (and so the SCHEMA messages) are built from the catalog's
    selected schema, so the mapper registers the new one and the stream drops its cached maps.
    The writer forwards the changed SCHEMA (it only drops identical repeats)."""
    schema = copy.deepcopy(stream.effective_schema)  # StreamSchema caches one dict per class
    schema.setdefault("properties", {})[name] = property_schema
    if stream._input_schema is not None:
        stream._input_schema = schema
    vars(stream)["schema"] = schema  # shadows the class's StreamSchema for this stream only
    selected = get_selected_schema(stream.name, schema, stream.mask)
    stream._tap.mapper.register_raw_stream_schema(stream.name, selected, stream.primary_keys)
    stream._stream_maps = None
    stream._write_schema_message()


def check_row(stream: Stream, row: dict[str, Any]) -> None:
    """Every row, before it is written (post_process)."""
    current: SchemaWatch | None = vars(stream).get(_WATCH_ATTRIBUTE)
    if current is None:
        mode = str(stream.config["schema_drift"])  # run/settings.py fills the default
        current = vars(stream)[_WATCH_ATTRIBUTE] = SchemaWatch(stream, mode)
    current.check(row)


def streams_starting(streams: Iterable[Stream]) -> None:
    """A sync starts: what a previous sync of the same tap object saw is forgotten."""
    for stream in streams:
        vars(stream).pop(_WATCH_ATTRIBUTE, None)


def streams_ended(streams: Iterable[Stream]) -> None:
    """The sync finished: warn about declared fields that never came, stream by stream."""
    for stream in streams:
        current: SchemaWatch | None = vars(stream).pop(_WATCH_ATTRIBUTE, None)
        if current is not None:
            current.report_missing()
