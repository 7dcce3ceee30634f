with daily_stats as ({{ latest_rows('daily_stats', ['venue_id', 'date']) }})

select
    cast(venue_id as {{ dbt.type_bigint() }}) as venue_id,
    cast(date as date) as stats_date,
    cast(visits as {{ dbt.type_bigint() }}) as visits,
    cast(unique_guests as {{ dbt.type_bigint() }}) as unique_guests,
    cast(marketing_opt_ins as {{ dbt.type_bigint() }}) as marketing_opt_ins,
    _sdc_extracted_at as read_at,
    -- a day read before it ended holds partial counts (the next run re-reads it)
    {{ london_date('_sdc_extracted_at') }} > cast(date as date) as is_final,
    _sdc_batched_at as loaded_at
from daily_stats
