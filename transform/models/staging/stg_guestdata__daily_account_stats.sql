with daily_account_stats as ({{ latest_rows('daily_account_stats', ['date']) }})

select
    cast(date as date) as stats_date,
    venue_ids,
    {{ array_size('venue_ids') }} as venue_count,
    cast(visits as {{ dbt.type_bigint() }}) as visits,
    cast(unique_guests as {{ dbt.type_bigint() }}) as unique_guests,
    cast(marketing_opt_ins as {{ dbt.type_bigint() }}) as marketing_opt_ins,
    _sdc_extracted_at as read_at,
    {{ london_date('_sdc_extracted_at') }} > cast(date as date) as is_final,
    _sdc_batched_at as loaded_at
from daily_account_stats
