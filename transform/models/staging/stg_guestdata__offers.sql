{{ account_table_config() }}
with offers as ({{ latest_rows('offers', ['id']) }})

select
    {{ account_columns() }}
    cast(id as {{ dbt.type_bigint() }}) as offer_id,
    cast(programme_id as {{ dbt.type_bigint() }}) as programme_id,
    cast(name as {{ dbt.type_string() }}) as offer_name,
    cast(headline as {{ dbt.type_string() }}) as headline,
    cast(kind as {{ dbt.type_string() }}) as kind,
    cast(percent as {{ dbt.type_numeric() }}) as percent_off,
    cast(amount_minor as {{ dbt.type_bigint() }}) as amount_minor,
    cast(currency as {{ dbt.type_string() }}) as currency,
    cast(estimated_value_minor as {{ dbt.type_bigint() }}) as estimated_value_minor,
    cast(free_item_label as {{ dbt.type_string() }}) as free_item_label,
    cast(min_spend_minor as {{ dbt.type_bigint() }}) as min_spend_minor,
    cast(points_cost as {{ dbt.type_bigint() }}) as points_cost,
    cast(show_in_catalogue as {{ dbt.type_boolean() }}) as show_in_catalogue,
    site_ids as valid_venue_ids,
    -- null: valid at every programme venue (spec 2.12)
    {{ array_size('site_ids') }} as valid_venue_count,
    cast(issue_on_connect as {{ dbt.type_boolean() }}) as issue_on_connect,
    cast(connect_frequency as {{ dbt.type_string() }}) as connect_frequency,
    cast(valid_days_after_issue as {{ dbt.type_bigint() }}) as valid_days_after_issue,
    starts_at,
    ends_at,
    cast(max_issues as {{ dbt.type_bigint() }}) as max_issues,
    cast(issued_count as {{ dbt.type_bigint() }}) as issued_count,
    cast(redemptions_count as {{ dbt.type_bigint() }}) as redemptions_count,
    cast(claims_count as {{ dbt.type_bigint() }}) as claims_count,
    cast(self_redeem as {{ dbt.type_boolean() }}) as self_redeem,
    channels,
    {{ array_size('channels') }} as channel_count,
    cast(status as {{ dbt.type_string() }}) as status,
    created_at,
    updated_at,
    _sdc_batched_at as loaded_at
from offers
