"""Fields the vendor adds to, or stops sending in, the rows of a path mid-life (schema drift):
the `add_field` and `remove_field` mutations. Spec part 2 fixes each row's fields; a real API
grows new ones without notice, and clients must not lose them silently.

Applied where list rows are rendered (`Store.encoded`), so the list endpoints, the single-record
reads of the same resource and `/_sandbox/truth` all agree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The paths whose rows carry changed fields, and the resource (tap stream) each lists.
ROW_PATHS = {
    "/guests": "guests",
    "/rewards/members": "members",
    "/rewards/members/{id}/ledger": "member_ledger",
    "/rewards/rewards": "rewards",
    "/rewards/redemptions": "redemptions",
}
_REMOVED = object()


class FieldChangeError(ValueError):
    """A field change that cannot apply (unknown path, no value rule)."""


@dataclass(frozen=True)
class FieldRule:
    """A field's value on each row: `values[row id % len(values)]` (one value: every row)."""

    values: tuple[Any, ...]

    def value_for(self, row: dict[str, Any]) -> Any:
        if self.values == (_REMOVED,):
            return _REMOVED
        return self.values[int(row["id"]) % len(self.values)]


def resource_of(path: Any) -> str:
    resource = ROW_PATHS.get(str(path).rstrip("/"))
    if resource is None:
        raise FieldChangeError(f"path must be one of {sorted(ROW_PATHS)}, got {path!r}")
    return resource


def added_rule(value: Any = None, values: Any = None) -> FieldRule:
    """`value` (default null) for every row, or `values` cycled over the rows by id."""
    if values is None:
        return FieldRule((value,))
    if not isinstance(values, list) or not values:
        raise FieldChangeError("values must be a non-empty list")
    return FieldRule(tuple(values))


REMOVED_RULE = FieldRule((_REMOVED,))


def apply(rendered: dict[str, Any], rules: dict[str, FieldRule]) -> dict[str, Any]:
    """The rendered row with its path's field changes (in place; rows are rendered afresh)."""
    for name, rule in rules.items():
        value = rule.value_for(rendered)
        if value is _REMOVED:
            rendered.pop(name, None)
        else:
            rendered[name] = value
    return rendered
