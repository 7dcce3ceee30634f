{{ account_table_config() }}
with programme as ({{ latest_rows('programme', ['id']) }})

select
    {{ account_columns() }}
    cast(id as {{ dbt.type_bigint() }}) as programme_id,
    cast(name as {{ dbt.type_string() }}) as programme_name,
    cast(mode as {{ dbt.type_string() }}) as mode,
    cast(default_currency as {{ dbt.type_string() }}) as default_currency,
    point_values,
    cast(points_per_visit as {{ dbt.type_bigint() }}) as points_per_visit,
    cast(points_per_currency_unit as {{ dbt.type_numeric() }}) as points_per_currency_unit,
    cast(signup_bonus_points as {{ dbt.type_bigint() }}) as signup_bonus_points,
    cast(birthday_bonus_points as {{ dbt.type_bigint() }}) as birthday_bonus_points,
    cast(points_expire_after_months as {{ dbt.type_bigint() }}) as points_expire_after_months,
    -- spec 2.6: left blank means 12 months
    cast(coalesce(points_expire_after_months, 12) as {{ dbt.type_bigint() }}) as points_expiry_months,
    cast(signup_offer_id as {{ dbt.type_bigint() }}) as signup_offer_id,
    cast(birthday_offer_id as {{ dbt.type_bigint() }}) as birthday_offer_id,
    cast(reward_label as {{ dbt.type_string() }}) as reward_label,
    {{ json_text('brand', 'programme_name') }} as brand_programme_name,
    cast(membership_optin_mode as {{ dbt.type_string() }}) as membership_optin_mode,
    cast(deliver_by_sms as {{ dbt.type_boolean() }}) as deliver_by_sms,
    cast(self_redeem_cap_minor as {{ dbt.type_bigint() }}) as self_redeem_cap_minor,
    cast(max_spend_per_earn_minor as {{ dbt.type_bigint() }}) as max_spend_per_earn_minor,
    cast(daily_earn_cap_points as {{ dbt.type_bigint() }}) as daily_earn_cap_points,
    {{ json_text('service_hours', 'open') }} as service_opens,
    {{ json_text('service_hours', 'close') }} as service_closes,
    cast(is_active as {{ dbt.type_boolean() }}) as is_active,
    activated_at,
    created_at,
    updated_at,
    _sdc_batched_at as loaded_at
from programme
