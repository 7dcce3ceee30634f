{{ account_table_config(holds_accounts=true) }}
-- depends_on: {{ ref('guestdata_account_status') }}
-- One row per issued reward, with its redemption (the latest, if voided and redeemed again)
-- and offer, the time to redeem, and the status as the API read it.
with rewards as (
    select * from {{ ref('stg_guestdata__rewards') }} where {{ in_rebuilt_accounts() }}
),

redemptions as (
    select
        *,
        row_number() over (
            partition by source_relation, reward_id order by redeemed_at desc, redemption_id desc
        ) as newest_first
    from {{ ref('stg_guestdata__redemptions') }}
    where {{ in_rebuilt_accounts() }}
),

offers as (
    select * from {{ ref('stg_guestdata__offers') }} where {{ in_rebuilt_accounts() }}
),

-- A held account keeps the rows of its last good build (macros/account_status.sql).
built as (
select
    rewards.source_relation,
    rewards.account_id,
    rewards.account_name,
    rewards.reward_id,
    rewards.offer_id,
    offers.offer_name,
    offers.kind as offer_kind,
    offers.status as offer_status,
    rewards.member_id,
    rewards.issued_venue_id,
    rewards.issued_via,
    rewards.issued_at,
    rewards.issued_on,
    rewards.expires_at,
    rewards.points_spent,
    rewards.status_as_read,
    -- a reward redeemed before a start_date's window has no redemption read (docs/tap.md,
    -- "What a start_date reads"): its own redemption fields stand in (spec 2.10)
    coalesce(redemptions.redemption_id, rewards.redemption_id) as redemption_id,
    redemptions.status as redemption_status,
    coalesce(redemptions.status = 'completed', rewards.status_as_read = 'redeemed') as is_redeemed,
    coalesce(redemptions.redeemed_at, rewards.redeemed_at) as redeemed_at,
    coalesce(redemptions.redeemed_on, {{ london_date('rewards.redeemed_at') }}) as redeemed_on,
    redemptions.venue_id as redeemed_venue_id,
    redemptions.channel as redemption_channel,
    redemptions.currency as redemption_currency,
    redemptions.face_value_minor,
    redemptions.discount_applied_minor,
    {{ seconds_between('rewards.issued_at', 'coalesce(redemptions.redeemed_at, rewards.redeemed_at)') }}
        as seconds_to_redeem,
    {{ build_started_at() }} as built_at
from rewards
left join redemptions
    on redemptions.source_relation = rewards.source_relation
    and redemptions.reward_id = rewards.reward_id
    and redemptions.newest_first = 1
left join offers
    on offers.source_relation = rewards.source_relation and offers.offer_id = rewards.offer_id
)

{{ held_accounts_kept('built') }}
