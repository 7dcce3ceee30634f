{{ account_table_config() }}
with programme_venues as ({{ latest_rows('programme_venues', ['site_id']) }})

select
    {{ account_columns() }}
    cast(site_id as {{ dbt.type_bigint() }}) as venue_id,
    cast(site_name as {{ dbt.type_string() }}) as venue_name,
    cast(currency as {{ dbt.type_string() }}) as currency,
    cast(earn_multiplier as {{ dbt.type_numeric() }}) as earn_multiplier,
    cast(is_active as {{ dbt.type_boolean() }}) as is_active,
    cast(mirror_partner as {{ dbt.type_string() }}) as mirror_partner,
    cast(mirror_to_partner as {{ dbt.type_boolean() }}) as mirror_to_partner,
    cast(timezone as {{ dbt.type_string() }}) as time_zone,
    cast(timezone_is_default as {{ dbt.type_boolean() }}) as time_zone_is_default,
    _sdc_batched_at as loaded_at
from programme_venues
