{{ account_table_config() }}
with venues as ({{ latest_rows('venues', ['id']) }})

select
    {{ account_columns() }}
    cast(id as {{ dbt.type_bigint() }}) as venue_id,
    cast(name as {{ dbt.type_string() }}) as venue_name,
    cast(city as {{ dbt.type_string() }}) as city,
    cast(country as {{ dbt.type_string() }}) as country,
    created_at,
    {{ london_date('created_at') }} as created_on,
    _sdc_batched_at as loaded_at
from venues
