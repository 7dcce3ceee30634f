{{ account_table_config() }}
with offer_stats as ({{ latest_rows('offer_stats', ['offer_id']) }})

select
    {{ account_columns() }}
    cast(offer_id as {{ dbt.type_bigint() }}) as offer_id,
    cast(issued as {{ dbt.type_bigint() }}) as issued,
    cast(outstanding as {{ dbt.type_bigint() }}) as outstanding,
    cast(redeemed as {{ dbt.type_bigint() }}) as redeemed,
    cast(voided as {{ dbt.type_bigint() }}) as voided,
    cast(expired as {{ dbt.type_bigint() }}) as expired,
    cast(claimed as {{ dbt.type_bigint() }}) as claimed,
    _sdc_extracted_at as read_at,
    _sdc_batched_at as loaded_at
from offer_stats
