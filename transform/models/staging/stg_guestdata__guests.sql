{{ incremental_staging_config('guest_visit_id') }}
-- One row per arrival (spec 2.3). The contact key is how spec 2.4 counts a person. A person
-- erased on request keeps their arrivals (they still count in the API's /stats) but no contact,
-- even when a load wrote them again after the erasure (macros/erasure_sql.sql).
with guests as ({{ latest_rows('guests', ['id'], incremental=true) }}),

arrivals as ({{ with_erasure_flag('guests', 'id', 'email', 'phone', 'guest_id') }})

select
    {{ account_columns(incremental=true) }}
    cast(id as {{ dbt.type_bigint() }}) as guest_visit_id,
    cast(venue_id as {{ dbt.type_bigint() }}) as venue_id,
    case when is_erased then {{ erasure_placeholder() }} else cast(name as {{ dbt.type_string() }}) end as full_name,
    case when is_erased then {{ erasure_placeholder() }} else cast(first_name as {{ dbt.type_string() }}) end as first_name,
    case when not is_erased then cast(last_name as {{ dbt.type_string() }}) end as last_name,
    case when is_erased then {{ erasure_placeholder() }} else cast(email as {{ dbt.type_string() }}) end as email,
    case when is_erased then {{ erasure_placeholder() }} else cast(phone as {{ dbt.type_string() }}) end as phone,
    case when not is_erased then {{ contact_key('email', 'phone') }} end as contact_key,
    case
        when is_erased then null
        when nullif(trim(email), '') is null then 'phone'
        else 'email'
    end as contact_type,
    is_erased or {{ is_masked('email', 'phone') }} as is_contact_masked,
    is_erased,
    cast(marketing_consent as {{ dbt.type_boolean() }}) as has_marketing_consent,
    cast(is_return_visit as {{ dbt.type_boolean() }}) as is_return_visit,
    visited_at,
    {{ london_date('visited_at') }} as visited_on,
    -- when the API rendered this row: its marketing_consent is the answer at that moment
    _sdc_extracted_at as read_at,
    _sdc_batched_at as loaded_at
from arrivals
