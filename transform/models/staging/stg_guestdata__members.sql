with members as ({{ latest_rows('members', ['id']) }})

select
    cast(id as {{ dbt.type_bigint() }}) as member_id,
    cast(member_number as {{ dbt.type_string() }}) as member_number,
    -- spec 3: active, left or anonymised; anonymised members have left as well
    case
        when anonymised_at is not null then 'anonymised'
        when left_at is not null then 'left'
        else 'active'
    end as member_status,
    cast(email as {{ dbt.type_string() }}) as email,
    cast(phone_e164 as {{ dbt.type_string() }}) as phone,
    {{ contact_key('email', 'phone_e164') }} as contact_key,
    {{ is_masked('email', 'phone_e164') }} as is_contact_masked,
    cast(first_name as {{ dbt.type_string() }}) as first_name,
    cast(last_name as {{ dbt.type_string() }}) as last_name,
    cast(date_of_birth as date) as date_of_birth,
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
    anonymised_at,
    created_at,
    {{ london_date('created_at') }} as joined_on,
    _sdc_extracted_at as read_at,
    _sdc_batched_at as loaded_at
from members
