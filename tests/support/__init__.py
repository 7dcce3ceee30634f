"""Helpers shared by the test suites (and by `bench/resume.py`), one home per concern.

- `streams`: the stream contract read from the tap (stream -> primary key), the stream groups,
  `key_of` and the one reader of the sandbox's ground truth (`truth_rows`), rows keyed and
  compared (`keyed_tables`, `changed_keys`).
- `sandbox`: a tap config pointing at a sandbox, the owner's key, the request log's last entry.
- `tap_process`: the tap run as users run it (a process), its Singer output parsed; `discover`.
- `json_values`: one rule for comparing a JSON value the tap emitted with the sandbox's.
- `tap_suite`, `reliability`, `kill_resume`, `sandbox_api`: the helpers of tests/tap,
  tests/reliability (kill-and-resume is also `bench/resume.py`'s) and tests/sandbox.
- `pipeline`: PostgreSQL and Meltano for the suites that run the Meltano project (e2e, dbt,
  Snowflake, Airflow), with the `pg_server`, `e2e_database` and `meltano_installed` fixtures
  (registered in tests/conftest.py); `dbt` and `snowflake_pipeline` build on it.

Imported as `support.<module>`: pyproject.toml's pytest `pythonpath` puts tests/ (and scripts/,
for the demo's checks) on the path.
"""
