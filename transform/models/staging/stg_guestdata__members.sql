{{ account_table_config() }}
-- A member erased on request reads as the API renders an anonymised member (spec 2.8, 3), even
-- when a load wrote them again after the erasure (macros/erasure_sql.sql).
with members as ({{ latest_rows('members', ['id']) }}),

people as ({{ with_erasure_flag('members', 'id', 'email', 'phone_e164', 'member_id') }})

select
    {{ account_columns() }}
    cast(id as {{ dbt.type_bigint() }}) as member_id,
    cast(member_number as {{ dbt.type_string() }}) as member_number,
    -- spec 3: active, left or anonymised; anonymised members have left as well
    case
        when is_erased or anonymised_at is not null then 'anonymised'
        when left_at is not null then 'left'
        else 'active'
    end as member_status,
    case when is_erased then {{ erasure_placeholder() }} else cast(email as {{ dbt.type_string() }}) end as email,
    case when is_erased then {{ erasure_placeholder() }} else cast(phone_e164 as {{ dbt.type_string() }}) end as phone,
    case when not is_erased then {{ contact_key('email', 'phone_e164') }} end as contact_key,
    is_erased or {{ is_masked('email', 'phone_e164') }} as is_contact_masked,
    is_erased,
    case when is_erased then {{ erasure_placeholder() }} else cast(first_name as {{ dbt.type_string() }}) end as first_name,
    case when not is_erased then cast(last_name as {{ dbt.type_string() }}) end as last_name,
    case when not is_erased then cast(date_of_birth as date) end as date_of_birth,
    cast(points_balance as {{ dbt.type_bigint() }}) as points_balance,
    cast(lifetime_points as {{ dbt.type_bigint() }}) as lifetime_points,
    cast(points_12m as {{ dbt.type_bigint() }}) as points_12m,
    cast(tier_key as {{ dbt.type_string() }}) as tier_key,
    tier_reached_at,
    cast(rewards_available as {{ dbt.type_bigint() }}) as rewards_available,
    cast(visits_count as {{ dbt.type_bigint() }}) as visits_count,
    last_visit_at,
    cast(last_visit_site_id as {{ dbt.type_bigint() }}) as last_visit_venue_id,
    cast(first_site_id as {{ dbt.type_bigint() }}) as first_venue_id,
    cast(joined_via as {{ dbt.type_string() }}) as joined_via,
    membership_consent_at,
    left_at,
    -- a raw row not erased yet (a load wrote it again) has no anonymised_at: its load time stands in
    case when is_erased then coalesce(anonymised_at, _sdc_batched_at) else anonymised_at end as anonymised_at,
    created_at,
    {{ london_date('created_at') }} as joined_on,
    _sdc_extracted_at as read_at,
    _sdc_batched_at as loaded_at
from people
