"""Stream declarations: `core` (spec 4.1) and `rewards` (spec 4.2)."""
