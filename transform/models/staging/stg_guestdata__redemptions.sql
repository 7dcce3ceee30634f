{{ incremental_staging_config('redemption_id') }}
with redemptions as ({{ latest_rows('redemptions', ['id'], incremental=true) }})

select
    {{ account_columns(incremental=true) }}
    cast(id as {{ dbt.type_bigint() }}) as redemption_id,
    cast(reference as {{ dbt.type_string() }}) as redemption_reference,
    cast(offer_id as {{ dbt.type_bigint() }}) as offer_id,
    cast(member_reward_id as {{ dbt.type_bigint() }}) as reward_id,
    cast(member_id as {{ dbt.type_bigint() }}) as member_id,
    cast(site_id as {{ dbt.type_bigint() }}) as venue_id,
    cast(site_name as {{ dbt.type_string() }}) as venue_name,
    cast(channel as {{ dbt.type_string() }}) as channel,
    cast(redeemed_by_user_id as {{ dbt.type_bigint() }}) as redeemed_by_user_id,
    cast(terminal_id as {{ dbt.type_bigint() }}) as terminal_id,
    cast(face_value_minor as {{ dbt.type_bigint() }}) as face_value_minor,
    cast(currency as {{ dbt.type_string() }}) as currency,
    cast(basket_total_minor as {{ dbt.type_bigint() }}) as basket_total_minor,
    cast(discount_applied_minor as {{ dbt.type_bigint() }}) as discount_applied_minor,
    cast(points_spent as {{ dbt.type_bigint() }}) as points_spent,
    cast(points_awarded as {{ dbt.type_bigint() }}) as points_awarded,
    cast(pos_reference as {{ dbt.type_string() }}) as pos_reference,
    cast(reason as {{ dbt.type_string() }}) as reason,
    -- completed or voided; a voided then restored redemption reads completed with restored_at
    cast(status as {{ dbt.type_string() }}) as status,
    voided_at,
    cast(void_reason as {{ dbt.type_string() }}) as void_reason,
    restored_at,
    created_at as redeemed_at,
    {{ london_date('created_at') }} as redeemed_on,
    _sdc_batched_at as loaded_at
from redemptions
