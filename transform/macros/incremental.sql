{#- Incremental staging (docs/transform-incremental.md). A model built this way reads,
    of every account's raw table, only the rows the loader wrote (_sdc_batched_at) or flagged
    deleted (_sdc_deleted_at: ACTIVATE_VERSION, the source-deletions hook) since the account's
    newest row in the model, less guestdata_incremental_lookback_hours (an account it holds no
    row of: every row), and replaces those keys. Keyed on the loader's
    times, not on business dates, so every way an old row changes is a new raw row or a new flag
    and is read again: the tap's lookbacks, late arrivals, a reloaded period, the weekly refresh,
    a deletion followed. Erasure updates the models' rows itself (macros/erasure.sql). The
    lookback only covers a batch stamped before the last build and committed after it.
    `dbt build --full-refresh` rebuilds from every raw row. -#}

{#- How far before its watermark an incremental build reads again (hours). -#}
{% macro incremental_lookback_hours() %}
  {{ return(var('guestdata_incremental_lookback_hours', env_var('GUESTDATA_INCREMENTAL_LOOKBACK_HOURS', '6')) | int) }}
{% endmacro %}

{#- Where the on-run-start hooks (source deletions, erasure) start reading each account's raw
    rows: {raw schema (lower case): an SQL literal}, the newest loader time the models were
    built from (that account's rows of stg_guestdata__guests), less the lookback. One query for
    every account (a subquery per account would read the whole model once per account). Empty
    (read every row) on --full-refresh and before the models exist; an account they do not hold
    yet has no entry. What the hooks did at earlier builds stays done: a raw row loaded before
    the watermark was read by an earlier hook, and a new read or a new row is loaded after it.
    The value goes through text and back to the column's own type, in the same warehouse. -#}
{% macro hook_watermarks() %}
  {% set staged = none if flags.FULL_REFRESH else erasure_model_relation('stg_guestdata__guests') %}
  {% if staged is none %}
    {{ return({}) }}
  {% endif %}
  {% set loaded_at = adapter.get_columns_in_relation(staged)
                     | selectattr('name', 'in', ['loaded_at', 'LOADED_AT']) | first %}
  {% set found = run_query(
      "select lower(source_relation), cast("
      ~ dbt.dateadd('hour', -1 * incremental_lookback_hours(), 'max(loaded_at)')
      ~ " as " ~ dbt.type_string() ~ ") from " ~ staged ~ " group by lower(source_relation)") %}
  {% set watermarks = {} %}
  {% for account, since in found.rows if since is not none %}
    {% do watermarks.update({account: "cast('" ~ since ~ "' as " ~ loaded_at.data_type ~ ")"}) %}
  {% endfor %}
  {{ return(watermarks) }}
{% endmacro %}

{#- A raw row loaded at or after the hook's watermark (every row without one). -#}
{% macro loaded_since(since, column='_sdc_batched_at') -%}
  {%- if since is none -%}
    (1 = 1)
  {%- else -%}
    coalesce({{ column }} >= {{ since }}, true)
  {%- endif -%}
{%- endmacro %}

{#- The model's config: incremental on its account-qualified key. on_schema_change ignore: the
    batch's tombstone column stays out of the table (a new model column takes --full-refresh).
    tmp_relation_type transient: the batch is a table, so the delete and the insert read the
    same rows (a view, read again after the delete, would see another watermark); fakesnow
    refuses dbt-snowflake's temporary tables and views. PostgreSQL always uses a temporary table. -#}
{% macro incremental_staging_config(key) %}
  {{ config(
      materialized='incremental',
      incremental_strategy='guestdata_upsert',
      unique_key=['source_relation', key],
      on_schema_change='ignore',
      tmp_relation_type='transient',
      post_hook=["{{ departed_accounts_removed() }}"],
  ) }}
{% endmacro %}

{#- A built model's watermark: the newest loader time of its rows, less the lookback (null while
    it is empty). -#}
{% macro build_watermark(relation) -%}
  (select {{ dbt.dateadd('hour', -1 * incremental_lookback_hours(), 'max(loaded_at)') }} from {{ relation }})
{%- endmacro %}

{#- Each account's watermark in a built model: (source_relation, since), the newest loader time of
    its rows less the lookback. An account the model holds no row of has none, and is read in
    full: a schema that becomes visible late (renamed into the pattern, or its account table
    loaded after the rest) is never behind another account's watermark. -#}
{% macro account_watermarks(relation) -%}
  select source_relation, {{ dbt.dateadd('hour', -1 * incremental_lookback_hours(), 'max(loaded_at)') }} as since
  from {{ relation }}
  group by source_relation
{%- endmacro %}

{#- A raw row the loader changed since its account's watermark (`since`: null reads it). -#}
{% macro changed_since_last_build(rows, since) -%}
  ({{ loaded_since(since, rows ~ '._sdc_batched_at') }} or {{ rows }}._sdc_deleted_at >= {{ since }})
{%- endmacro %}

{#- An incremental model's post-hook: the rows of an account no longer among the raw schemas
    (offboarded, or renamed: it comes back under its new name, read in full) leave the model,
    so its marts and audience go at the next build (docs/transform.md, "Accounts in
    production"). The table models are rebuilt from these. -#}
{% macro departed_accounts_removed() -%}
delete from {{ this }}
where source_relation not in (select source_relation from {{ ref('stg_guestdata__account') }})
{%- endmacro %}

{#- When the build that last wrote the row started (dbt's run_started_at, UTC): every incremental
    model has it as built_at, so a nightly build's data tests read the rows it wrote
    (macros/data_test_scope.sql), and a reader can take what changed since a time. -#}
{% macro build_started_at() -%}
  cast('{{ run_started_at.strftime("%Y-%m-%d %H:%M:%S.%f") }}+00:00' as {{ instant_type() }})
{%- endmacro %}

{#- The relation has built_at (an incremental model built before it existed has not, until a
    --full-refresh adds it). -#}
{% macro has_built_at(relation) %}
  {{ return('built_at' in adapter.get_columns_in_relation(relation) | map(attribute='name') | map('lower') | list) }}
{% endmacro %}

{#- An instant's type, as the loader's times have it (compared with them whatever the session's
    time zone). -#}
{% macro instant_type() -%}
  {{ return(adapter.dispatch('instant_type', 'guestdata')()) }}
{%- endmacro %}

{% macro postgres__instant_type() -%}
  timestamp with time zone
{%- endmacro %}

{% macro default__instant_type() -%}
  timestamp_tz
{%- endmacro %}

{#- The key's newest raw row was flagged deleted: the batch carries it only so that its old row
    is removed (get_incremental_guestdata_upsert_sql inserts no tombstone). -#}
{% macro tombstone_column(incremental) -%}
  {%- if incremental and is_incremental() %}
    _sdc_deleted_at is not null as guestdata_is_tombstone,
  {%- endif -%}
{%- endmacro %}

{#- dbt's delete+insert, except that the batch's tombstones are deleted and not inserted. The
    same SQL on PostgreSQL and Snowflake (dbt's own delete+insert form). A mart neither deletes
    nor inserts a held account's keys: they keep their last good rows (macros/account_status.sql). -#}
{% macro get_incremental_guestdata_upsert_sql(arg_dict) %}
  {%- set keys = arg_dict['unique_key'] | join(', ') -%}
  {%- set columns = get_quoted_csv(arg_dict['dest_columns'] | map(attribute='name')) -%}
  {%- set held = held_accounts() if (config.get('meta') or {}).get('guestdata_holds_accounts') else [] -%}
delete from {{ arg_dict['target_relation'] }}
where ({{ keys }}) in (select distinct {{ keys }} from {{ arg_dict['temp_relation'] }}){{ not_held(held) }};
insert into {{ arg_dict['target_relation'] }} ({{ columns }})
select {{ columns }} from {{ arg_dict['temp_relation'] }} where not guestdata_is_tombstone{{ not_held(held) }}
{% endmacro %}

{#- A mart built incrementally (fct_venue_daily, marketing_audience): the model computes the keys
    touched since its last build (mart_since) and emits each of them, a key no longer in the full
    build as a tombstone; guestdata_upsert replaces exactly those keys. holds_accounts: a held
    account's keys keep their last good rows (macros/account_status.sql); a staging model built
    this way (stg_guestdata__guest_reads) holds none. -#}
{% macro incremental_mart_config(key, holds_accounts=true) %}
  {%- set post_hook = ["{{ departed_accounts_removed() }}"] -%}
  {%- if holds_accounts -%}
    {%- do post_hook.append("{{ held_accounts_first_built_removed() }}") -%}
  {%- endif -%}
  {{ config(
      materialized='incremental',
      incremental_strategy='guestdata_upsert',
      unique_key=key,
      on_schema_change='ignore',
      tmp_relation_type='transient',
      meta={'guestdata_holds_accounts': holds_accounts},
      post_hook=post_hook,
  ) }}
{% endmacro %}

{#- The mart's watermark: the newest loader time its rows were computed from, less the lookback. -#}
{% macro mart_since() -%}
  (select coalesce({{ dbt.dateadd('hour', -1 * incremental_lookback_hours(), 'max(loaded_at)') }}, cast('1900-01-01' as {{ dbt.type_timestamp() }})) from {{ this }})
{%- endmacro %}

{#- The larger of two values, either of which may be null (Snowflake's greatest returns null when
    any argument is). -#}
{% macro greatest_of(a, b) -%}
  greatest(coalesce({{ a }}, {{ b }}), coalesce({{ b }}, {{ a }}))
{%- endmacro %}

{#- For an incremental mart: the accounts it has no row of yet, whose account_id or name
    changed, or released from a hold in this build (guestdata_account_status): all their keys
    are computed again. -#}
{% macro accounts_new_or_renamed() -%}
    select accounts.source_relation
    from {{ rebuilt_rows(ref('stg_guestdata__account'), 'accounts') }}
    left join (select distinct source_relation, account_id, account_name from {{ rebuilt_rows(this) }}) as built
        on built.source_relation = accounts.source_relation
    where built.source_relation is null
        or built.account_id is distinct from accounts.account_id
        or built.account_name is distinct from accounts.account_name
        or accounts.source_relation in (
            select source_relation from {{ ref('guestdata_account_status') }} where is_catching_up
        )
{%- endmacro %}
