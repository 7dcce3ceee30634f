-- Venue-days whose API stats and guest rows differ because guests were deleted in the API between
-- the two reads (macros/visits_reconciliation.sql): not a loss, so it warns, and says which read
-- settles it. The weekly refresh re-reads both guests and stats over its window.
{{ config(
    severity='warn',
    meta={'advice': "guests were deleted in the API after part of these venue-days was read (spec 1); the weekly refresh follows it (guests deleted inside its window are flagged, stats re-read). To follow it now: `meltano run --full-refresh tap-guestdata--refresh target-postgres guestdata-pg-types:timestamptz dbt-postgres:build` (Airflow: trigger guestdata_meltano_weekly_refresh)."}
) }}

select
    source_relation,
    account_name,
    venue_id,
    date,
    visits,
    api_visits,
    api_stats_read_at,
    guests_read_started_at,
    guests_read_completed_at,
    case
        when visits > api_visits
            then 'guests deleted in the API since this day was last read in full: the next read of guests covering it (the weekly refresh) flags them'
        else 'guests deleted in the API after this day''s stats were read: the next read of its stats (the weekly refresh) matches'
    end as what_to_do
from {{ ref('fct_venue_daily') }}
where {{ visits_reconciled_venue_days() }}
    and visits <> api_visits
    and {{ visits_differ_by_source_deletions() }}
