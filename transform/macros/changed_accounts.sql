{#- A nightly whose cost follows what changed (docs/transform-incremental.md, "Accounts with
    nothing new"; issue 43). Every build starts by taking a fingerprint of each account's raw
    tables (record_fingerprints: on PostgreSQL the tables' change counters, on Snowflake their
    rows and newest loader and deletion times) and compares it with the fingerprint of the last
    build that built every model. An account whose tables all read the same has nothing new: no
    model reads its raw rows (union_raw leaves its schema out), the models rebuilt per account
    keep its rows (the guestdata_accounts strategy) and the marts built by key read none of its
    rows (rebuilt_rows). A night with nothing new costs one catalog query and dbt's own start,
    not a union of every schema.

    What a fingerprint sees: every row a loader adds, replaces or deletes, every flag of
    ACTIVATE_VERSION or the source-deletions hook, a table made again, and an erasure request
    recorded or released (the models' own rows are erased in place: macros/erasure.sql). A
    project upgrade that changes what a model computes takes `--full-refresh`, as for every
    incremental model. -#}

{#- Where the fingerprints and this build's changed accounts are kept: in the models' schema,
    beside guestdata_tested_builds. seen: this build's; built: the last complete build's. -#}
{% macro account_changes_location(name) %}
  {{ return(api.Relation.create(database=target.database, schema=target.schema,
                                identifier='guestdata_raw_' ~ name)) }}
{% endmacro %}

{#- The tables fingerprinted and what of each: every raw table of the source (its loader's and
    the deletion flag's times), and the erasure requests (macros/erasure.sql: a request or its
    release changes what the models hold). -#}
{% macro fingerprinted_tables() %}
  {% set tables = {} %}
  {% for source in graph.sources.values() if source.package_name == 'guestdata' %}
    {% do tables.update({source.name: ['_sdc_batched_at', '_sdc_deleted_at']}) %}
  {% endfor %}
  {% do tables.update({'guestdata_erasures': ['requested_at']}) %}
  {{ return(tables) }}
{% endmacro %}

{#- This build's fingerprint of every account's fingerprinted tables (`tables`:
    fingerprinted_tables) into `seen`: (source_relation, table_name, fingerprint), lower case.
    An account schema: the pattern matches and it holds the tap's account table. -#}
{% macro record_fingerprints(seen, tables) %}
  {{ return(adapter.dispatch('record_fingerprints', 'guestdata')(seen, tables)) }}
{% endmacro %}

{#- PostgreSQL: each table's change counters (rows inserted, updated and deleted, which every
    load, flag and hard delete moves), its oid and file (a table dropped and made again, or
    truncated) and when the counters were last reset: one catalog query, no table opened
    (reading 14,000 tables' rows took 11 s at 1,000 accounts). A loader's counters are sent as
    its transactions end, and at the latest as its process exits: a load still running as the
    build starts is read by the next build, never lost, as its counters then differ from the
    record. Without track_counts there are no counters: every account reads as changed. The
    account look-up as in postgres__raw_columns_sql. -#}
{% macro postgres__record_fingerprints(seen, tables) %}
  {% do adapter.execute(
      "insert into " ~ seen ~ " (source_relation, table_name, fingerprint)"
      ~ " select lower(schemas.nspname), lower(tables.relname),"
      ~ " case when current_setting('track_counts') = 'on' then concat_ws(':', tables.oid, tables.relfilenode,"
      ~ " pg_stat_get_tuples_inserted(tables.oid), pg_stat_get_tuples_updated(tables.oid),"
      ~ " pg_stat_get_tuples_deleted(tables.oid), resets.stats_reset) else '" ~ invocation_id ~ "' end"
      ~ " from pg_catalog.pg_namespace as schemas"
      ~ " join pg_catalog.pg_class as tables on tables.relnamespace = schemas.oid"
      ~ " cross join (select stats_reset from pg_catalog.pg_stat_database where datname = current_database()) as resets"
      ~ " where schemas.nspname like '" ~ raw_schema_pattern() ~ "' and tables.relkind in ('r', 'p')"
      ~ " and tables.relname in ('" ~ tables.keys() | join("', '") ~ "')"
      ~ " and exists (select 1 from pg_catalog.pg_class as account"
      ~ " where account.relnamespace = schemas.oid and account.relname = 'account' offset 0)",
      auto_begin=true) %}
  {% do adapter.commit() %}
{% endmacro %}

{#- Snowflake: each table's rows and newest times (count and max, which Snowflake answers from
    its micro-partitions' metadata), a bounded statement per batch of tables, each committed on
    its own. The account schemas' tables come from one query of information_schema.tables (as
    default__raw_columns_queries reads it), which also writes each table's select: rendering
    them in dbt took 10 s at 1,000 accounts. -#}
{% macro default__record_fingerprints(seen, tables) %}
  {% set selects = [] %}
  {% for table, columns in tables.items() %}
    {% set times = [] %}
    {% for column in columns %}
      {% do times.append("coalesce(cast(max(" ~ column ~ ") as " ~ dbt.type_string() ~ "), '''')") %}
    {% endfor %}
    {% do selects.append("when '" ~ table | upper ~ "' then ', cast(count(*) as " ~ dbt.type_string()
                         ~ ") || '':'' || " ~ times | join(" || '':'' || ") ~ " from '") %}
  {% endfor %}
  {% set found = run_query(
      "select 'select ''' || lower(tables.table_schema) || ''', ''' || lower(tables.table_name) || ''''"
      ~ " || case tables.table_name " ~ selects | join(' ') ~ " end"
      ~ " || '\"' || tables.table_schema || '\".\"' || tables.table_name || '\"'"
      ~ " from information_schema.tables as tables"
      ~ " join information_schema.tables as account on account.table_schema = tables.table_schema"
      ~ " and account.table_name = 'ACCOUNT'"
      ~ " where tables.table_schema like '" ~ raw_schema_pattern() | upper ~ "'"
      ~ " and tables.table_name in ('" ~ tables.keys() | map('upper') | join("', '") ~ "')") %}
  {% set branches = [] %}
  {% for row in found.rows %}
    {% do branches.append({'sql': row[0], 'size': row[0] | length + 16}) %}
  {% endfor %}
  {% for batch in batches_within(branches, statement_batch_bytes()) %}
    {% do adapter.execute('insert into ' ~ seen ~ ' (source_relation, table_name, fingerprint)\n'
                          ~ union_all(batch | map(attribute='sql') | list), auto_begin=true) %}
    {% do adapter.commit() %}
  {% endfor %}
{% endmacro %}

{#- on-run-start, last: this build's fingerprints (guestdata_raw_seen: record_fingerprints),
    then which accounts differ from the last complete build (guestdata_raw_changes: an account
    without a record, or a table added, changed or gone). -#}
{% macro note_changed_accounts() %}
  {% if not execute or flags.WHICH not in ['build', 'run', 'retry'] %}
    {{ return('') }}
  {% endif %}
  {% set seen, built, changes = account_changes_location('seen'), account_changes_location('built'),
                                account_changes_location('changes') %}
  {% for relation in [seen, built] %}
    {% do adapter.execute('create table if not exists ' ~ relation ~ ' (source_relation ' ~ dbt.type_string()
                          ~ ', table_name ' ~ dbt.type_string() ~ ', fingerprint ' ~ dbt.type_string() ~ ')', auto_begin=true) %}
  {% endfor %}
  {% do adapter.execute('create table if not exists ' ~ changes ~ ' (source_relation ' ~ dbt.type_string()
                        ~ ', is_changed ' ~ dbt.type_boolean() ~ ')', auto_begin=true) %}
  {% do adapter.execute('delete from ' ~ seen, auto_begin=true) %}
  {% do adapter.commit() %}
  {% do record_fingerprints(seen, fingerprinted_tables()) %}
  {% do adapter.execute('delete from ' ~ changes, auto_begin=true) %}
  {% do adapter.execute(account_changes_sql(seen, built, changes), auto_begin=true) %}
  {% do adapter.commit() %}
  {% set counted = run_query('select count(*), sum(case when is_changed then 1 else 0 end) from ' ~ changes).rows[0] %}
  {{ log('accounts with new raw rows: ' ~ (counted[1] or 0) ~ ' of ' ~ counted[0]
         ~ ' (the others keep the rows their last build made)', info=True) }}
  {{ return('') }}
{% endmacro %}

{% macro account_changes_sql(seen, built, changes) -%}
insert into {{ changes }} (source_relation, is_changed)
select accounts.source_relation, differing.source_relation is not null
from (select distinct source_relation from {{ seen }}) as accounts
left join (
    select seen.source_relation
    from {{ seen }} as seen
    left join {{ built }} as built
        on built.source_relation = seen.source_relation and built.table_name = seen.table_name
    where built.fingerprint is null or built.fingerprint <> seen.fingerprint
    union
    select built.source_relation
    from {{ built }} as built
    left join {{ seen }} as seen
        on seen.source_relation = built.source_relation and seen.table_name = built.table_name
    where seen.fingerprint is null
) as differing on differing.source_relation = accounts.source_relation
{%- endmacro %}

{#- on-run-end: when this invocation built every model, every account's models are now as its
    fingerprint says (the changed ones rebuilt, the rest were already), so it becomes the record.
    Otherwise (a --select, a failed model) the record stays: the next build reads the changed
    accounts again. -#}
{% macro record_built_accounts(results) %}
  {% if not execute or flags.WHICH not in ['build', 'run'] %}
    {{ return('') }}
  {% endif %}
  {% set succeeded = results | selectattr('status', 'equalto', 'success') | map(attribute='node.unique_id') | list %}
  {% set models = graph.nodes.values() | selectattr('resource_type', 'equalto', 'model')
                  | selectattr('package_name', 'equalto', 'guestdata') | map(attribute='unique_id') | list %}
  {% set built, seen = account_changes_location('built'), account_changes_location('seen') %}
  {% if models | reject('in', succeeded) | list %}
    {{ log('not every model was built: the accounts with new raw rows are read again by the next build', info=True) }}
    {{ return('') }}
  {% endif %}
  {% do adapter.execute('delete from ' ~ built, auto_begin=true) %}
  {% do adapter.execute('insert into ' ~ built ~ ' (source_relation, table_name, fingerprint)'
                        ~ ' select source_relation, table_name, fingerprint from ' ~ seen, auto_begin=true) %}
  {% do adapter.commit() %}
  {{ return('') }}
{% endmacro %}

{#- The accounts a model reads this build ({raw schema in lower case: true}), or none for every
    account: a first build, --full-refresh, or outside a run or build (compile, show).
    Accounts with new raw rows, and in a mart that holds accounts those released from a hold
    (accounts_new_or_renamed: their marts kept their last good rows). -#}
{% macro rebuilt_accounts() %}
  {% if not reads_rebuilt_accounts() %}
    {{ return(none) }}
  {% endif %}
  {% set accounts = {} %}
  {% for name in run_query(rebuilt_accounts_sql()).columns[0].values() %}
    {% do accounts.update({name | lower: true}) %}
  {% endfor %}
  {{ return(accounts) }}
{% endmacro %}

{#- Whether this model reads only some accounts: an incremental build of it, with
    guestdata_raw_changes in dbt's relation cache (taken at the invocation's start: the build
    that first makes the table reads every account). -#}
{% macro reads_rebuilt_accounts() %}
  {{ return(execute and flags.WHICH in ['build', 'run', 'retry'] and this is defined and this is not none
            and is_incremental() and load_relation(account_changes_location('changes')) is not none) }}
{% endmacro %}

{% macro rebuilt_accounts_sql() -%}
select source_relation from {{ account_changes_location('changes') }} where is_changed
{%- if (config.get('meta') or {}).get('guestdata_holds_accounts') %}
union
select source_relation from {{ account_status_relation() }} where is_catching_up
{%- endif %}
{%- endmacro %}

{#- A relation a mart built by key reads, as `alias` (its own name without one): only the rows of
    the accounts rebuilt_accounts names (every row where that is none). A key of another account
    has nothing new to compute. -#}
{% macro rebuilt_rows(relation, alias=none) -%}
  {%- if reads_rebuilt_accounts() -%}
(select * from {{ relation }} where source_relation in ({{ rebuilt_accounts_sql() }})) as {{ alias or relation.identifier }}
  {%- else -%}
{{ relation }} as {{ alias or relation.identifier }}
  {%- endif -%}
{%- endmacro %}

{#- A mart's filter on the staging rows it reads: the accounts rebuilt_accounts names (every row
    where that is none). -#}
{% macro in_rebuilt_accounts(column='source_relation') -%}
  {%- if not reads_rebuilt_accounts() -%}
    (1 = 1)
  {%- else -%}
    {{ column }} in ({{ rebuilt_accounts_sql() }})
  {%- endif -%}
{%- endmacro %}

{#- A model rebuilt per account: each build computes the rows of the accounts rebuilt_accounts
    names and keeps every other account's (built_at: its tests read the rows it wrote,
    macros/data_test_scope.sql). tmp_relation_type: as incremental_staging_config says. -#}
{% macro account_table_config(holds_accounts=false) %}
  {{ config(
      materialized='incremental',
      incremental_strategy='guestdata_accounts',
      unique_key='source_relation',
      on_schema_change='ignore',
      tmp_relation_type='transient',
      meta={'guestdata_holds_accounts': holds_accounts},
  ) }}
{% endmacro %}

{#- guestdata_accounts: the rows of every account not kept go (rebuilt, departed from the raw
    schemas, or held: the batch carries a held account's last good rows, held_accounts_kept),
    and the batch goes in. -#}
{% macro get_incremental_guestdata_accounts_sql(arg_dict) %}
  {%- set columns = get_quoted_csv(arg_dict['dest_columns'] | map(attribute='name')) -%}
  {%- set changes = account_changes_location('changes') -%}
delete from {{ arg_dict['target_relation'] }}
where source_relation not in (select source_relation from {{ changes }} where not is_changed)
    or source_relation in ({{ rebuilt_accounts_sql() }})
    or source_relation in (select source_relation from {{ arg_dict['temp_relation'] }});
insert into {{ arg_dict['target_relation'] }} ({{ columns }})
select {{ columns }} from {{ arg_dict['temp_relation'] }}
{% endmacro %}
