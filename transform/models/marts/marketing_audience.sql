-- depends_on: {{ ref('stg_guestdata__account') }}
{{ incremental_mart_config(['source_relation', 'contact_key']) }}
-- depends_on: {{ ref('guestdata_account_status') }}
{{ config(pre_hook="{{ without_nested_loops() }}") }}
{%- set incremental = is_incremental() %}
-- One row per person who may be sent marketing now: consent as last read (spec 2.3: the
-- person's answer now, on every arrival row), never an old visit's flag, never a masked
-- contact, never the contact of an anonymised member or of a person erased on request.
-- Incremental (docs/transform-incremental.md): only the contacts with a guest row
-- written since the last build, every contact of an account with a deletion or a new name, and
-- every anonymised member's contact are computed again, and replace their rows.
-- stg_guestdata__guests is read where it is used (fct_venue_daily says why).
with erased as (
    select source_relation, contact_key from {{ rebuilt_rows(ref('stg_guestdata__members')) }}
    where member_status = 'anonymised' and contact_key is not null
    union
    select source_relation, nullif(trim(phone), '') from {{ rebuilt_rows(ref('stg_guestdata__members')) }}
    where member_status = 'anonymised' and nullif(trim(phone), '') is not null
),
{% if incremental %}
since as (
    select {{ mart_since() }} as since
),

whole_accounts as (
    select deleted.source_relation
    from ({{ union_raw('guests') }}) as deleted
    cross join since
    where deleted._sdc_deleted_at >= since.since
    union
    {{ accounts_new_or_renamed() }}
),

affected as (
    select all_guests.source_relation, all_guests.contact_key
    from {{ rebuilt_rows(ref('stg_guestdata__guests'), 'all_guests') }}
    cross join since
    where all_guests.contact_key is not null and all_guests.loaded_at >= since.since
    union
    select source_relation, contact_key from erased
    union
    select source_relation, contact_key from {{ rebuilt_rows(this) }}
    where source_relation in (select source_relation from whole_accounts)
    union
    select source_relation, contact_key from {{ rebuilt_rows(ref('stg_guestdata__guests')) }}
    where contact_key is not null
        and source_relation in (select source_relation from whole_accounts)
),
{% endif %}
guests as (
    select * from {{ rebuilt_rows(ref('stg_guestdata__guests')) }}
    where contact_key is not null
        and not is_contact_masked
        and not is_erased
    {%- if incremental %}
        and (source_relation, contact_key) in (select source_relation, contact_key from affected)
    {%- endif %}
),

latest_read as (
    select
        *,
        row_number() over (
            partition by source_relation, contact_key
            order by read_at desc, visited_at desc, guest_visit_id desc
        ) as newest_first
    from guests
),

visits as (
    select
        source_relation,
        contact_key,
        count(*) as visits,
        min(visited_at) as first_visit_at,
        max(visited_at) as last_visit_at,
        count(distinct venue_id) as venue_count,
        max(loaded_at) as loaded_at,
        {{ array_agg_distinct_sorted('venue_id') }} as venue_ids
    from guests
    group by source_relation, contact_key
),

last_visit as (
    select
        source_relation,
        contact_key,
        venue_id,
        row_number() over (
            partition by source_relation, contact_key order by visited_at desc, guest_visit_id desc
        ) as newest_first
    from guests
),

audience as (
select
    latest_read.source_relation,
    latest_read.account_id,
    latest_read.account_name,
    {{ build_started_at() }} as built_at,
    latest_read.contact_key,
    latest_read.contact_type,
    latest_read.email,
    latest_read.phone,
    latest_read.first_name,
    latest_read.last_name,
    visits.visits,
    visits.first_visit_at,
    visits.last_visit_at,
    last_visit.venue_id as last_visit_venue_id,
    visits.venue_count,
    visits.venue_ids,
    -- the newest loader time of the contact's rows: the incremental watermark
    visits.loaded_at
from latest_read
inner join visits
    on visits.source_relation = latest_read.source_relation
    and visits.contact_key = latest_read.contact_key
inner join last_visit
    on last_visit.source_relation = latest_read.source_relation
    and last_visit.contact_key = latest_read.contact_key
    and last_visit.newest_first = 1
left join erased
    on erased.source_relation = latest_read.source_relation
    and erased.contact_key = latest_read.contact_key
where latest_read.newest_first = 1
    and latest_read.has_marketing_consent
    and erased.contact_key is null
)
{% if incremental %}
select audience.*, false as guestdata_is_tombstone from audience
union all
-- an affected contact no longer in the audience: its row is removed
select
    affected.source_relation, null, null, null, affected.contact_key, null, null, null, null, null,
    null, null, null, null, null, null, null, true
from affected
left join audience
    on audience.source_relation = affected.source_relation
    and audience.contact_key = affected.contact_key
where audience.contact_key is null
{% else %}
select * from audience
{% endif %}
