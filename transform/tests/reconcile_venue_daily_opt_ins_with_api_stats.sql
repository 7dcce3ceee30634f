-- Opt-ins counted from guest rows equal the API's for every final day. The API counts consent
-- as it stands now (spec 2.4), guest rows as it stood when read: a difference is a stale flag
-- (an unsubscribe, bounce or complaint since), so it warns.
{{ config(
    severity='warn',
    meta={'advice': "marketing consent changed after these guests were loaded (unsubscribed, suppressed, bounced or complained: spec 2.3). Only the weekly refresh re-reads old guests; run it before sending marketing: `meltano run --full-refresh tap-guestdata--refresh target-postgres guestdata-pg-types:timestamptz dbt-postgres:build`."}
) }}

select
    source_relation,
    account_name,
    venue_id,
    date,
    marketing_opt_ins,
    api_marketing_opt_ins,
    'run the weekly refresh before sending marketing' as what_to_do
from {{ ref('fct_venue_daily') }}
where has_api_stats
    and api_stats_final
    and is_complete_day
    and visits = api_visits
    and marketing_opt_ins <> api_marketing_opt_ins
