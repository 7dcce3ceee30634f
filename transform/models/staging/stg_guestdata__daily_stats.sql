{{ account_table_config() }}
with daily_stats as ({{ latest_rows('daily_stats', ['venue_id', 'date']) }})

select
    {{ account_columns() }}
    cast(venue_id as {{ dbt.type_bigint() }}) as venue_id,
    cast(date as date) as stats_date,
    {{ api_stats_columns() }}
from daily_stats
