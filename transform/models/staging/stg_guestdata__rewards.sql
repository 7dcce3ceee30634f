{{ incremental_staging_config('reward_id') }}
with rewards as ({{ latest_rows('rewards', ['id'], incremental=true) }})

select
    {{ account_columns(incremental=true) }}
    cast(id as {{ dbt.type_bigint() }}) as reward_id,
    cast(offer_id as {{ dbt.type_bigint() }}) as offer_id,
    cast(offer_name as {{ dbt.type_string() }}) as offer_name,
    cast(offer_headline as {{ dbt.type_string() }}) as offer_headline,
    cast(member_id as {{ dbt.type_bigint() }}) as member_id,
    -- null for a programme-wide reward (spec 2.10)
    cast(site_id as {{ dbt.type_bigint() }}) as issued_venue_id,
    cast(site_name as {{ dbt.type_string() }}) as issued_venue_name,
    cast(code as {{ dbt.type_string() }}) as code,
    cast(display_code as {{ dbt.type_string() }}) as display_code,
    cast(kind as {{ dbt.type_string() }}) as kind,
    cast(percent as {{ dbt.type_numeric() }}) as percent_off,
    cast(amount_minor as {{ dbt.type_bigint() }}) as amount_minor,
    cast(currency as {{ dbt.type_string() }}) as currency,
    cast(free_item_label as {{ dbt.type_string() }}) as free_item_label,
    cast(min_spend_minor as {{ dbt.type_bigint() }}) as min_spend_minor,
    site_ids as valid_venue_ids,
    -- spec 3: as read; a reward stored as issued reads as expired once expires_at passed
    cast(status as {{ dbt.type_string() }}) as status_as_read,
    cast(uses_remaining as {{ dbt.type_bigint() }}) as uses_remaining,
    issued_at,
    {{ london_date('issued_at') }} as issued_on,
    expires_at,
    cast(issued_via as {{ dbt.type_string() }}) as issued_via,
    cast(points_spent as {{ dbt.type_bigint() }}) as points_spent,
    cast(is_locked as {{ dbt.type_boolean() }}) as is_locked,
    locked_until,
    redeemed_at,
    cast(redemption_id as {{ dbt.type_bigint() }}) as redemption_id,
    cast(redeemed_via as {{ dbt.type_string() }}) as redeemed_via,
    delivered_email_at,
    delivered_sms_at,
    viewed_at,
    cast(view_count as {{ dbt.type_bigint() }}) as view_count,
    _sdc_extracted_at as read_at,
    _sdc_batched_at as loaded_at
from rewards
