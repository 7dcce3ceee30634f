{#- The current row per primary key of a raw table, per account (macros/accounts.sql: every
    account's raw schema, with source_relation and account_name). target-postgres upserts on the
    key, but an append-only load or a replayed batch can still leave several rows; ACTIVATE_VERSION
    marks rows a full-table sync no longer saw with _sdc_deleted_at, and those are gone. Each row
    gets its account's account_id (the API's, from the schema's account table). -#}
{% macro latest_rows(table, keys, incremental=false) -%}
{%- set changed_only = incremental and is_incremental() -%}
select ranked.*{{ ', accounts.account_id' if table != 'account' }}
from (
    select
        raw_rows.*,
        row_number() over (
            partition by raw_rows.source_relation, {{ keys | join(', ') }}
            order by raw_rows._sdc_batched_at desc, raw_rows._sdc_sequence desc
        ) as loader_row_rank
    from ({{ union_raw(table) }}) as raw_rows
    {#- incremental: the keys changed since their account's last build, a deleted one as a
        tombstone #}
    {%- if changed_only %}
    left join ({{ account_watermarks(this) }}) as watermarks
        on watermarks.source_relation = raw_rows.source_relation
    {%- endif %}
    where {{ changed_since_last_build('raw_rows', 'watermarks.since') if changed_only else 'raw_rows._sdc_deleted_at is null' }}
) as ranked
{%- if table != 'account' %}
left join {{ ref('stg_guestdata__account') }} as accounts
    on accounts.source_relation = ranked.source_relation
{%- endif %}
where ranked.loader_row_rank = 1
{%- endmacro %}

{#- The account columns every staging model starts with (its rows from latest_rows), and
    built_at (every staging model is incremental: by key, `incremental`, or by account). -#}
{% macro account_columns(incremental=false) -%}
    {{- tombstone_column(incremental) }}
    cast(source_relation as {{ dbt.type_string() }}) as source_relation,
    cast(account_id as {{ dbt.type_bigint() }}) as account_id,
    cast(account_name as {{ dbt.type_string() }}) as account_name,
    {{ build_started_at() }} as built_at,
{%- endmacro %}

{#- A contact as one person: the email (lower case), or the phone where the splash page collects
    a phone instead (spec 2.4 unique_guests: matched on email, or on mobile number). -#}
{% macro contact_key(email, phone) -%}
  coalesce(nullif(lower(trim({{ email }})), ''), nullif(trim({{ phone }}), ''))
{%- endmacro %}

{#- spec 2.3 / 2.8: masked contacts are partly replaced with asterisks. -#}
{% macro is_masked(email, phone) -%}
  (coalesce({{ email }}, '') like '%*%' or coalesce({{ phone }}, '') like '%*%')
{%- endmacro %}

{#- The columns /stats rows share (spec 2.4), per venue or for the account. A day read before it
    ended holds partial counts (the next run re-reads it): is_final says whether it had ended. -#}
{% macro api_stats_columns() -%}
    cast(visits as {{ dbt.type_bigint() }}) as visits,
    cast(unique_guests as {{ dbt.type_bigint() }}) as unique_guests,
    cast(marketing_opt_ins as {{ dbt.type_bigint() }}) as marketing_opt_ins,
    _sdc_extracted_at as read_at,
    {{ london_date('_sdc_extracted_at') }} > cast(date as date) as is_final,
    _sdc_batched_at as loaded_at
{%- endmacro %}
