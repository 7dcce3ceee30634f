{#- Every staging model (and so, in `dbt build`, every staging test) comes before this one, and
    this one before every mart. A new staging model joins the list (tests/transform/test_project_files.py). -#}
{%- for staging in ['stg_guestdata__account', 'stg_guestdata__venues', 'stg_guestdata__guests',
                    'stg_guestdata__guest_reads', 'stg_guestdata__daily_stats',
                    'stg_guestdata__daily_account_stats', 'stg_guestdata__programme',
                    'stg_guestdata__programme_venues', 'stg_guestdata__tiers',
                    'stg_guestdata__members', 'stg_guestdata__member_ledger',
                    'stg_guestdata__offers', 'stg_guestdata__offer_stats',
                    'stg_guestdata__rewards', 'stg_guestdata__redemptions'] %}
-- depends_on: {{ ref(staging) }}
{%- endfor %}
{%- set last = adapter.get_relation(database=this.database, schema=this.schema, identifier=this.identifier) if execute else none %}
-- One row per account: whether this build updates its marts (docs/transform.md, "Accounts in
-- production"; macros/account_status.sql). Held: a staging test failed for it in this build,
-- or its load failed; its marts keep the rows of marts_built_at. A monitor reads this table.
with accounts as (
    select source_relation, account_id, account_name from {{ ref('stg_guestdata__account') }}
),

reasons as (
    {{ staging_check_failures() }}
    {%- for schema in failed_loads() %}
    union all
    select '{{ schema }}', 'its load failed', cast(null as {{ dbt.type_bigint() }})
    {%- endfor %}
),

held as (
    select
        source_relation,
        {{ dbt.listagg("reason || coalesce(': ' || cast(failing_rows as " ~ dbt.type_string() ~ ") || ' rows', '')", "'; '", "order by reason") }} as held_reasons,
        sum(failing_rows) as failing_rows
    from reasons
    group by source_relation
)

select
    accounts.source_relation,
    accounts.account_id,
    accounts.account_name,
    case when held.source_relation is null then 'current' else 'held' end as status,
    held.held_reasons,
    held.failing_rows,
    -- the first build of this hold
    case when held.source_relation is not null
        then {% if last %}coalesce(last.held_since, {{ build_started_at() }}){% else %}{{ build_started_at() }}{% endif %}
    end as held_since,
    -- the build whose rows its marts hold (null: none yet)
    case when held.source_relation is null then {{ build_started_at() }}
        {%- if last %} else last.marts_built_at{% endif %}
    end as marts_built_at,
    -- released from a hold: the marts compute its keys whole (accounts_new_or_renamed)
    {% if last %}coalesce(held.source_relation is null and last.status = 'held', false){% else %}false{% endif %} as is_catching_up,
    -- the tests of its marts that failed or warned (set at the build's end: report_account_status)
    cast(null as {{ dbt.type_string() }}) as mart_check_failures,
    {{ build_started_at() }} as checked_at,
    cast('{{ invocation_id }}' as {{ dbt.type_string() }}) as invocation_id
from accounts
left join held on held.source_relation = accounts.source_relation
{%- if last %}
left join {{ last }} as last on last.source_relation = accounts.source_relation
{%- endif %}
