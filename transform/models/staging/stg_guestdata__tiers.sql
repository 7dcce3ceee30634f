{{ account_table_config() }}
with tiers as ({{ latest_rows('tiers', ['programme_id', 'key']) }})

select
    {{ account_columns() }}
    cast(programme_id as {{ dbt.type_bigint() }}) as programme_id,
    cast(key as {{ dbt.type_string() }}) as tier_key,
    cast(name as {{ dbt.type_string() }}) as tier_name,
    cast(min_points_12m as {{ dbt.type_bigint() }}) as min_points_12m,
    cast(multiplier as {{ dbt.type_numeric() }}) as multiplier,
    cast(colour as {{ dbt.type_string() }}) as colour,
    _sdc_batched_at as loaded_at
from tiers
