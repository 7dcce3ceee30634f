{{ account_table_config() }}
with account as ({{ latest_rows('account', ['account_id']) }})

select
    {{ account_columns() }}
    cast(business_name as {{ dbt.type_string() }}) as business_name,
    cast(plan as {{ dbt.type_string() }}) as plan_name,
    cast(venue_count as {{ dbt.type_bigint() }}) as venue_count,
    _sdc_batched_at as loaded_at
from account
