-- Visits and unique guests counted from guest rows equal the API's /stats for every final day
-- both were read for. A difference means guest rows are lost (or the API erased some): error.
{{ config(
    severity='error',
    meta={'advice': "guest rows are missing or extra for these venue-days. Re-read guests in full with the weekly refresh now: `meltano run --full-refresh tap-guestdata--refresh target-postgres guestdata-pg-types:timestamptz dbt-postgres:build` (Airflow: trigger guestdata_meltano_weekly_refresh)."}
) }}

select
    venue_id,
    date,
    visits,
    api_visits,
    unique_guests,
    api_unique_guests,
    'run the weekly refresh (guests read in full)' as what_to_do
from {{ ref('fct_venue_daily') }}
where has_api_stats
    and api_stats_final
    and is_complete_day
    and (visits <> api_visits or unique_guests <> api_unique_guests)
