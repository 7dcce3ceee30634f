-- A member's balance equals the sum of their ledger deltas and the newest line's balance_after
-- (spec 2.9). A difference means a lost ledger line or a member row older than its ledger.
{{ config(
    severity='error',
    meta={'advice': "these members' balances no longer match their ledgers: ledger lines are missing or member rows are stale. Re-read the members group in full: `meltano run --full-refresh tap-guestdata--members target-postgres guestdata-pg-types:timestamptz dbt-postgres:build`."}
) }}

select
    source_relation,
    account_name,
    member_id,
    points_balance,
    ledger_points_sum,
    ledger_last_balance_after,
    ledger_lines,
    're-read the members group in full' as what_to_do
from {{ ref('dim_members') }}
where not balance_matches_ledger
