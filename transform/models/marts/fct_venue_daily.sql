{{ incremental_mart_config(['source_relation', 'venue_id', 'date']) }}
-- depends_on: {{ ref('guestdata_account_status') }}
{%- set incremental = is_incremental() %}
-- One row per venue and London day over the guest history read (from start_date, if set),
-- counted from guest rows by the rules of spec 2.4, with the API's own daily_stats beside them
-- where that day was loaded.
-- Incremental (docs/transform-incremental.md): a build recomputes only the venue-days
-- something changed since the last one (affected_days), and replaces exactly those.
-- stg_guestdata__guests is read where it is used, not as one common table: PostgreSQL would
-- materialize the whole history once, every column, before any filter.
with venues as (
    select * from {{ rebuilt_rows(ref('stg_guestdata__venues')) }}
),

-- An account's guest history is complete up to the London day of its latest read.
as_of as (
    select source_relation, {{ london_date('max(read_at)') }} as as_of_date
    from {{ rebuilt_rows(ref('stg_guestdata__guests')) }}
    group by source_relation
),

day_numbers as (
    {{ dbt.generate_series(var('guestdata_max_history_days')) }}
),

-- Days before an account's window (a start_date) were not read: no row claims them.
read_from as (
    {{ accounts_read_from() }}
),

api as (
    select * from {{ rebuilt_rows(ref('stg_guestdata__daily_stats')) }}
),

-- Trusted complete reads of a venue's guests (stg_guestdata__guest_reads): a day one covered
-- whole holds the API's guest rows as of some moment between the newest one's start and finish.
guest_reads as (
    select * from {{ rebuilt_rows(ref('stg_guestdata__guest_reads')) }}
    where is_trusted
),
{% if incremental %}
since as (
    select {{ mart_since() }} as since
),

-- The day before which an account's days were complete at the last build: from it on, days
-- become complete or enter the spine.
built_as_of as (
    select source_relation, min(date) as as_of_date
    from {{ rebuilt_rows(this) }}
    where not is_complete_day
    group by source_relation
),

-- Accounts new or renamed, venues new or renamed: all their days.
whole_accounts as (
    {{ accounts_new_or_renamed() }}
),

whole_venues as (
    select venues.source_relation, venues.venue_id
    from venues
    left join (select distinct source_relation, venue_id, venue_name from {{ rebuilt_rows(this) }}) as built
        on built.source_relation = venues.source_relation and built.venue_id = venues.venue_id
    where built.source_relation is null
        or built.venue_name is distinct from venues.venue_name
        or venues.source_relation in (select source_relation from whole_accounts)
),

-- Guest days changed since the last build: arrivals written, flagged deleted (their raw rows
-- keep venue and time), erased on request (erasure updates staging in place).
touched_guest_days as (
    select all_guests.source_relation, all_guests.venue_id, all_guests.visited_on as date
    from {{ rebuilt_rows(ref('stg_guestdata__guests'), 'all_guests') }}
    cross join since
    where all_guests.loaded_at >= since.since or all_guests.is_erased
    union
    select deleted.source_relation, cast(deleted.venue_id as {{ dbt.type_bigint() }}),
        {{ london_date('deleted.visited_at') }}
    from ({{ union_raw('guests') }}) as deleted
    cross join since
    where deleted._sdc_deleted_at >= since.since
),

-- A venue's oldest guests_read_* as built, and whether a day has none: a trusted read started
-- and completed no later than those changes no day it covers.
read_floors as (
    select source_relation, venue_id, min(guests_read_started_at) as oldest_start,
        min(guests_read_completed_at) as oldest_completion,
        max(case when guests_read_started_at is null then 1 else 0 end) as has_unread_day
    from {{ rebuilt_rows(this) }}
    group by source_relation, venue_id
),

-- The built days whose newest trusted read changed: a read newer than one the day holds, new or
-- trusted since (a read becomes trusted once its rows are held). Only the reads newer than
-- their venue's floor are compared: those since the last whole read, not every read held.
touched_read_days as (
    select built.source_relation, built.venue_id, built.date
    from guest_reads
    inner join read_floors
        on read_floors.source_relation = guest_reads.source_relation
        and read_floors.venue_id = guest_reads.venue_id
    inner join {{ rebuilt_rows(this, 'built') }}
        on built.source_relation = guest_reads.source_relation
        and built.venue_id = guest_reads.venue_id
        and built.date >= guest_reads.covered_from_day
        and built.date < guest_reads.covered_until_day
    where (read_floors.has_unread_day = 1
            or guest_reads.read_started_at > read_floors.oldest_start
            or guest_reads.completed_at > read_floors.oldest_completion)
        and (built.guests_read_started_at is null
            or built.guests_read_started_at < guest_reads.read_started_at
            or built.guests_read_completed_at < guest_reads.completed_at)
),

affected_days as (
    select source_relation, venue_id, date from touched_guest_days
    union
    select api.source_relation, api.venue_id, api.stats_date
    from api
    cross join since
    where api.loaded_at >= since.since
    union
    select source_relation, venue_id, date from touched_read_days
    union
    -- the days built, from each account's last incomplete day, or of a whole venue or account
    select built.source_relation, built.venue_id, built.date
    from {{ rebuilt_rows(this, 'built') }}
    left join built_as_of
        on built_as_of.source_relation = built.source_relation
    left join whole_venues
        on whole_venues.source_relation = built.source_relation
        and whole_venues.venue_id = built.venue_id
    where built.date >= built_as_of.as_of_date
        or whole_venues.venue_id is not null
        or built.source_relation in (select source_relation from whole_accounts)
    union
    -- the venue days to be, the same way
    select venues.source_relation, venues.venue_id,
        cast({{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} as date)
    from venues
    cross join day_numbers
    inner join as_of on as_of.source_relation = venues.source_relation
    left join read_from on read_from.source_relation = venues.source_relation
    left join built_as_of on built_as_of.source_relation = venues.source_relation
    left join whole_venues
        on whole_venues.source_relation = venues.source_relation
        and whole_venues.venue_id = venues.venue_id
    where {{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} <= as_of.as_of_date
        and {{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} >= coalesce(read_from.read_from_day, venues.created_on)
        and (whole_venues.venue_id is not null
            or built_as_of.as_of_date is null
            or {{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} >= built_as_of.as_of_date)
    union
    select all_guests.source_relation, all_guests.venue_id, all_guests.visited_on
    from {{ rebuilt_rows(ref('stg_guestdata__guests'), 'all_guests') }}
    left join built_as_of on built_as_of.source_relation = all_guests.source_relation
    left join whole_venues
        on whole_venues.source_relation = all_guests.source_relation
        and whole_venues.venue_id = all_guests.venue_id
    where whole_venues.venue_id is not null
        or built_as_of.as_of_date is null
        or all_guests.visited_on >= built_as_of.as_of_date
),

guests as (
    select *
    from {{ rebuilt_rows(ref('stg_guestdata__guests')) }}
    where (source_relation, venue_id, visited_on) in (
        select source_relation, venue_id, date from affected_days
    )
),

-- The affected days, each with whether it is a row of the full build (a venue day or a day
-- with arrivals); the others are removed (tombstones).
guest_days as (
    select distinct source_relation, venue_id, visited_on as date from guests
),

spine as (
    select
        affected_days.source_relation,
        affected_days.venue_id,
        affected_days.date,
        (lifetime.venue_id is not null or guest_days.venue_id is not null) as is_row
    from affected_days
    left join as_of
        on as_of.source_relation = affected_days.source_relation
    left join read_from
        on read_from.source_relation = affected_days.source_relation
    left join venues as lifetime
        on lifetime.source_relation = affected_days.source_relation
        and lifetime.venue_id = affected_days.venue_id
        and affected_days.date >= lifetime.created_on
        and affected_days.date >= coalesce(read_from.read_from_day, lifetime.created_on)
        and affected_days.date <= as_of.as_of_date
        and affected_days.date < {{ dbt.dateadd('day', var('guestdata_max_history_days'), 'lifetime.created_on') }}
    left join guest_days
        on guest_days.source_relation = affected_days.source_relation
        and guest_days.venue_id = affected_days.venue_id
        and guest_days.date = affected_days.date
),
{% else %}
guests as (
    select * from {{ rebuilt_rows(ref('stg_guestdata__guests')) }}
),

venue_days as (
    select
        venues.source_relation,
        venues.venue_id,
        cast({{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} as date) as date
    from venues
    cross join day_numbers
    inner join as_of on as_of.source_relation = venues.source_relation
    left join read_from on read_from.source_relation = venues.source_relation
    where {{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} <= as_of.as_of_date
        and {{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} >= coalesce(read_from.read_from_day, venues.created_on)
),

-- Days with arrivals are kept even outside the venue's lifetime, so no guest row is lost.
spine as (
    select source_relation, venue_id, date from venue_days
    union
    select source_relation, venue_id, visited_on as date from guests
),
{% endif %}

from_guests as (
    select
        source_relation,
        venue_id,
        visited_on as date,
        count(*) as visits,
        count(distinct contact_key) as unique_guests,
        sum(case when has_marketing_consent then 1 else 0 end) as marketing_opt_ins,
        sum(case when is_return_visit then 1 else 0 end) as return_visits,
        -- arrivals of people erased on request: counted as visits, no longer as people
        sum(case when is_erased then 1 else 0 end) as erased_visits,
        max(loaded_at) as loaded_at
    from guests
    group by source_relation, venue_id, visited_on
),

guests_read as (
    select
        spine.source_relation,
        spine.venue_id,
        spine.date,
        max(guest_reads.read_started_at) as guests_read_started_at,
        max(guest_reads.completed_at) as guests_read_completed_at
    from spine
    inner join guest_reads
        on guest_reads.source_relation = spine.source_relation
        and guest_reads.venue_id = spine.venue_id
        and guest_reads.covered_from_day <= spine.date
        and guest_reads.covered_until_day > spine.date
    group by spine.source_relation, spine.venue_id, spine.date
)

select
    {{- ' not spine.is_row as guestdata_is_tombstone,' if incremental }}
    spine.source_relation,
    accounts.account_id,
    accounts.account_name,
    {{ build_started_at() }} as built_at,
    spine.venue_id,
    venues.venue_name,
    spine.date,
    coalesce(from_guests.visits, 0) as visits,
    coalesce(from_guests.unique_guests, 0) as unique_guests,
    coalesce(from_guests.marketing_opt_ins, 0) as marketing_opt_ins,
    coalesce(from_guests.return_visits, 0) as return_visits,
    coalesce(from_guests.erased_visits, 0) as erased_visits,
    spine.date < as_of.as_of_date as is_complete_day,
    api.visits as api_visits,
    api.unique_guests as api_unique_guests,
    api.marketing_opt_ins as api_marketing_opt_ins,
    api.stats_date is not null as has_api_stats,
    coalesce(api.is_final, false) as api_stats_final,
    api.read_at as api_stats_read_at,
    guests_read.guests_read_started_at,
    guests_read.guests_read_completed_at,
    -- the newest loader time of the rows this day was counted from: the incremental watermark
    {{ greatest_of('from_guests.loaded_at', 'api.loaded_at') }} as loaded_at
from spine
{{ 'left' if incremental else 'inner' }} join as_of
    on as_of.source_relation = spine.source_relation
left join {{ rebuilt_rows(ref('stg_guestdata__account'), 'accounts') }}
    on accounts.source_relation = spine.source_relation
left join venues
    on venues.source_relation = spine.source_relation and venues.venue_id = spine.venue_id
left join from_guests
    on from_guests.source_relation = spine.source_relation
    and from_guests.venue_id = spine.venue_id
    and from_guests.date = spine.date
left join api
    on api.source_relation = spine.source_relation
    and api.venue_id = spine.venue_id
    and api.stats_date = spine.date
left join guests_read
    on guests_read.source_relation = spine.source_relation
    and guests_read.venue_id = spine.venue_id
    and guests_read.date = spine.date
