{{ incremental_mart_config(['source_relation', 'member_id']) }}
-- depends_on: {{ ref('guestdata_account_status') }}
{%- set incremental = is_incremental() %}
-- depends_on: {{ ref('stg_guestdata__account') }}
-- One row per member: status, tier, balances and visits as the API gave them, and what the
-- ledger says (spec 2.9: balance_after follows the deltas, so both should equal the balance).
-- Incremental (docs/transform-incremental.md): only the members whose row or ledger
-- was written since the last build, erased, no longer listed, or whose tier's name changed are
-- computed again (the ledger grows with the history; a night touches a few hundred members).
with members as (
    select * from {{ rebuilt_rows(ref('stg_guestdata__members')) }}
),

tiers as (
    select * from {{ rebuilt_rows(ref('stg_guestdata__tiers')) }}
),
{% if incremental %}
since as (
    select {{ mart_since() }} as since
),

affected as (
    select members.source_relation, members.member_id
    from members
    cross join since
    where members.loaded_at >= since.since
        -- erasure rewrites the staging row, not its loader time
        or members.is_erased
        or members.source_relation in ({{ accounts_new_or_renamed() }})
    union
    select ledger.source_relation, ledger.member_id
    from {{ rebuilt_rows(ref('stg_guestdata__member_ledger'), 'ledger') }}
    cross join since
    where ledger.loaded_at >= since.since
    union
    -- ledger lines flagged deleted (ACTIVATE_VERSION): gone from staging, so read raw
    select deleted.source_relation, cast(deleted.member_id as {{ dbt.type_bigint() }})
    from ({{ union_raw('member_ledger') }}) as deleted
    cross join since
    where deleted._sdc_deleted_at >= since.since
    union
    -- members no longer listed, and tiers renamed or gone (tiers are read again every run)
    select built.source_relation, built.member_id
    from {{ rebuilt_rows(this, 'built') }}
    left join members
        on members.source_relation = built.source_relation and members.member_id = built.member_id
    left join tiers
        on tiers.source_relation = built.source_relation and tiers.tier_key = built.tier_key
    where members.member_id is null
        or (built.tier_key is not null and built.tier_name is distinct from tiers.tier_name)
),
{% else %}
affected as (
    select source_relation, member_id from members
),
{% endif %}
ledger as (
    select
        *,
        row_number() over (
            partition by source_relation, member_id order by created_at desc, ledger_entry_id desc
        ) as newest_first
    from {{ rebuilt_rows(ref('stg_guestdata__member_ledger')) }}
    {%- if incremental %}
    where (source_relation, member_id) in (select source_relation, member_id from affected)
    {%- endif %}
),

ledger_totals as (
    select
        source_relation,
        member_id,
        count(*) as ledger_lines,
        sum(points_delta) as ledger_points_sum,
        max(case when newest_first = 1 then balance_after end) as ledger_last_balance_after,
        max(created_at) as ledger_last_entry_at,
        max(loaded_at) as loaded_at
    from ledger
    group by source_relation, member_id
)

select
    {{- ' members.member_id is null as guestdata_is_tombstone,' if incremental }}
    affected.source_relation,
    members.account_id,
    members.account_name,
    {{ build_started_at() }} as built_at,
    affected.member_id,
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
        as balance_matches_ledger,
    -- the newest loader time of the member's row and ledger: the incremental watermark
    {{ greatest_of('members.loaded_at', 'ledger_totals.loaded_at') }} as loaded_at
from affected
{{ 'left' if incremental else 'inner' }} join members
    on members.source_relation = affected.source_relation
    and members.member_id = affected.member_id
left join tiers
    on tiers.source_relation = members.source_relation
    and tiers.tier_key = members.tier_key
left join ledger_totals
    on ledger_totals.source_relation = members.source_relation
    and ledger_totals.member_id = members.member_id
