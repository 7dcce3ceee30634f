{{ account_table_config(holds_accounts=true) }}
-- depends_on: {{ ref('guestdata_account_status') }}
-- One row per offer: the funnel counted from rewards and redemptions by the rules of the
-- offer's data.stats (spec 2.12), and the API's offer_stats beside it.
with offers as (
    select * from {{ ref('stg_guestdata__offers') }} where {{ in_rebuilt_accounts() }}
),

rewards as (
    select
        source_relation,
        offer_id,
        count(*) as issued,
        sum(case when status_as_read = 'issued' then 1 else 0 end) as outstanding,
        sum(case when status_as_read = 'expired' then 1 else 0 end) as expired,
        sum(case when issued_via = 'points' then 1 else 0 end) as claimed
    from {{ ref('stg_guestdata__rewards') }}
    where {{ in_rebuilt_accounts() }}
    group by source_relation, offer_id
),

redemptions as (
    select
        redemptions.source_relation,
        redemptions.offer_id,
        sum(case when redemptions.status = 'completed' then 1 else 0 end) as redeemed,
        sum(case when redemptions.status = 'voided' then 1 else 0 end) as voided,
        -- amounts in the offer's currency only: minor units of two currencies do not add up
        sum(
            case
                when redemptions.status = 'completed' and redemptions.currency = offers.currency
                    then redemptions.discount_applied_minor
                else 0
            end
        ) as discount_given_minor,
        sum(
            case
                when redemptions.status = 'completed' and redemptions.currency <> offers.currency
                    then 1
                else 0
            end
        ) as redemptions_in_other_currencies
    from {{ ref('stg_guestdata__redemptions') }} as redemptions
    inner join offers
        on offers.source_relation = redemptions.source_relation
        and offers.offer_id = redemptions.offer_id
    where {{ in_rebuilt_accounts('redemptions.source_relation') }}
    group by redemptions.source_relation, redemptions.offer_id
),

api as (
    select * from {{ ref('stg_guestdata__offer_stats') }} where {{ in_rebuilt_accounts() }}
),

-- Under a start_date, redemptions are read from it and rewards from before it (docs/tap.md,
-- "What a start_date reads"): an offer created in the window has its whole funnel here.
read_from as (
    {{ accounts_read_from() }}
),

-- A held account keeps the rows of its last good build (macros/account_status.sql).
built as (
select
    offers.source_relation,
    offers.account_id,
    offers.account_name,
    offers.offer_id,
    offers.offer_name,
    offers.kind,
    offers.status,
    offers.currency,
    coalesce(rewards.issued, 0) as issued,
    coalesce(rewards.outstanding, 0) as outstanding,
    coalesce(redemptions.redeemed, 0) as redeemed,
    coalesce(redemptions.voided, 0) as voided,
    coalesce(rewards.expired, 0) as expired,
    coalesce(rewards.claimed, 0) as claimed,
    cast(coalesce(redemptions.redeemed, 0) as {{ dbt.type_numeric() }})
        / nullif(coalesce(rewards.issued, 0), 0) as redemption_rate,
    coalesce(redemptions.discount_given_minor, 0) as discount_given_minor,
    coalesce(redemptions.redemptions_in_other_currencies, 0) as redemptions_in_other_currencies,
    api.issued as api_issued,
    api.outstanding as api_outstanding,
    api.redeemed as api_redeemed,
    api.voided as api_voided,
    api.expired as api_expired,
    api.claimed as api_claimed,
    api.offer_id is not null as has_api_stats,
    coalesce({{ london_date('offers.created_at') }} >= read_from.read_from_day, true)
        as has_whole_funnel,
    {{ build_started_at() }} as built_at
from offers
left join read_from on read_from.source_relation = offers.source_relation
left join rewards
    on rewards.source_relation = offers.source_relation and rewards.offer_id = offers.offer_id
left join redemptions
    on redemptions.source_relation = offers.source_relation
    and redemptions.offer_id = offers.offer_id
left join api on api.source_relation = offers.source_relation and api.offer_id = offers.offer_id
)

{{ held_accounts_kept('built') }}
