-- One row per member: status, tier, balances and visits as the API gave them, and what the
-- ledger says (spec 2.9: balance_after follows the deltas, so both should equal the balance).
with members as (
    select * from {{ ref('stg_guestdata__members') }}
),

tiers as (
    select * from {{ ref('stg_guestdata__tiers') }}
),

ledger as (
    select
        *,
        row_number() over (
            partition by source_relation, member_id order by created_at desc, ledger_entry_id desc
        ) as newest_first
    from {{ ref('stg_guestdata__member_ledger') }}
),

ledger_totals as (
    select
        source_relation,
        member_id,
        count(*) as ledger_lines,
        sum(points_delta) as ledger_points_sum,
        max(case when newest_first = 1 then balance_after end) as ledger_last_balance_after,
        max(created_at) as ledger_last_entry_at
    from ledger
    group by source_relation, member_id
)

select
    members.source_relation,
    members.account_id,
    members.account_name,
    members.member_id,
    members.member_number,
    members.member_status,
    -- an erased member keeps no contact here (the API shows placeholders)
    case when members.member_status <> 'anonymised' then members.email end as email,
    case when members.member_status <> 'anonymised' then members.phone end as phone,
    case when members.member_status <> 'anonymised' then members.first_name end as first_name,
    case when members.member_status <> 'anonymised' then members.last_name end as last_name,
    members.is_contact_masked,
    members.tier_key,
    tiers.tier_name,
    members.tier_reached_at,
    members.points_balance,
    members.lifetime_points,
    members.points_12m,
    members.rewards_available,
    members.visits_count,
    members.last_visit_at,
    members.last_visit_venue_id,
    members.first_venue_id,
    members.joined_via,
    members.created_at as joined_at,
    members.joined_on,
    members.left_at,
    members.anonymised_at,
    coalesce(ledger_totals.ledger_lines, 0) as ledger_lines,
    coalesce(ledger_totals.ledger_points_sum, 0) as ledger_points_sum,
    ledger_totals.ledger_last_balance_after,
    ledger_totals.ledger_last_entry_at,
    members.points_balance = coalesce(ledger_totals.ledger_points_sum, 0)
    and members.points_balance = coalesce(ledger_totals.ledger_last_balance_after, 0)
        as balance_matches_ledger
from members
left join tiers
    on tiers.source_relation = members.source_relation
    and tiers.tier_key = members.tier_key
left join ledger_totals
    on ledger_totals.source_relation = members.source_relation
    and ledger_totals.member_id = members.member_id
