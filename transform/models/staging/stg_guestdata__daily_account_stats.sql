{{ account_table_config() }}
with daily_account_stats as ({{ latest_rows('daily_account_stats', ['date']) }})

select
    {{ account_columns() }}
    cast(date as date) as stats_date,
    venue_ids,
    {{ array_size('venue_ids') }} as venue_count,
    {{ api_stats_columns() }}
from daily_account_stats
