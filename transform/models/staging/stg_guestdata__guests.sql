-- One row per arrival (spec 2.3). The contact key is how spec 2.4 counts a person.
with guests as ({{ latest_rows('guests', ['id']) }})

select
    cast(id as {{ dbt.type_bigint() }}) as guest_visit_id,
    cast(venue_id as {{ dbt.type_bigint() }}) as venue_id,
    cast(name as {{ dbt.type_string() }}) as full_name,
    cast(first_name as {{ dbt.type_string() }}) as first_name,
    cast(last_name as {{ dbt.type_string() }}) as last_name,
    cast(email as {{ dbt.type_string() }}) as email,
    cast(phone as {{ dbt.type_string() }}) as phone,
    {{ contact_key('email', 'phone') }} as contact_key,
    case when nullif(trim(email), '') is null then 'phone' else 'email' end as contact_type,
    {{ is_masked('email', 'phone') }} as is_contact_masked,
    cast(marketing_consent as {{ dbt.type_boolean() }}) as has_marketing_consent,
    cast(is_return_visit as {{ dbt.type_boolean() }}) as is_return_visit,
    visited_at,
    {{ london_date('visited_at') }} as visited_on,
    -- when the API rendered this row: its marketing_consent is the answer at that moment
    _sdc_extracted_at as read_at,
    _sdc_batched_at as loaded_at
from guests
