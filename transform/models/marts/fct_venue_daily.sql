-- One row per venue and London day over the whole guest history, counted from guest rows by
-- the rules of spec 2.4, with the API's own daily_stats beside them where that day was loaded.
with guests as (
    select * from {{ ref('stg_guestdata__guests') }}
),

venues as (
    select * from {{ ref('stg_guestdata__venues') }}
),

-- An account's guest history is complete up to the London day of its latest read.
as_of as (
    select source_relation, max({{ london_date('read_at') }}) as as_of_date
    from guests
    group by source_relation
),

day_numbers as (
    {{ dbt.generate_series(var('guestdata_max_history_days')) }}
),

venue_days as (
    select
        venues.source_relation,
        venues.venue_id,
        cast({{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} as date) as date
    from venues
    cross join day_numbers
    inner join as_of on as_of.source_relation = venues.source_relation
    where {{ dbt.dateadd('day', 'day_numbers.generated_number - 1', 'venues.created_on') }} <= as_of.as_of_date
),

-- Days with arrivals are kept even outside the venue's lifetime, so no guest row is lost.
spine as (
    select source_relation, venue_id, date from venue_days
    union
    select source_relation, venue_id, visited_on as date from guests
),

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
        sum(case when is_erased then 1 else 0 end) as erased_visits
    from guests
    group by source_relation, venue_id, visited_on
),

api as (
    select * from {{ ref('stg_guestdata__daily_stats') }}
),

-- Complete reads of a venue's guests that covered the whole day (read_windows): the day's guest
-- rows are the API's as of some moment between the newest one's start and finish
-- (macros/source_deletions.sql).
guest_reads as (
    {{ guest_reads_sql() }}
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
    spine.source_relation,
    accounts.account_id,
    accounts.account_name,
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
    guests_read.guests_read_completed_at
from spine
inner join as_of
    on as_of.source_relation = spine.source_relation
left join {{ ref('stg_guestdata__account') }} as accounts
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
