{{ incremental_staging_config('ledger_entry_id') }}
with member_ledger as ({{ latest_rows('member_ledger', ['id'], incremental=true) }})

select
    {{ account_columns(incremental=true) }}
    cast(id as {{ dbt.type_bigint() }}) as ledger_entry_id,
    cast(member_id as {{ dbt.type_bigint() }}) as member_id,
    cast(site_id as {{ dbt.type_bigint() }}) as venue_id,
    cast(delta as {{ dbt.type_bigint() }}) as points_delta,
    cast(balance_after as {{ dbt.type_bigint() }}) as balance_after,
    cast(reason as {{ dbt.type_string() }}) as reason,
    cast(reference as {{ dbt.type_string() }}) as reference,
    cast(spend_minor as {{ dbt.type_bigint() }}) as spend_minor,
    cast(currency as {{ dbt.type_string() }}) as currency,
    cast(note as {{ dbt.type_string() }}) as note,
    cast(created_by_user_id as {{ dbt.type_bigint() }}) as created_by_user_id,
    cast(terminal_id as {{ dbt.type_bigint() }}) as terminal_id,
    created_at,
    {{ london_date('created_at') }} as created_on,
    _sdc_batched_at as loaded_at
from member_ledger
