{#- One account's failure stays that account's (docs/transform.md, "Accounts in production").

    Every data test's failing rows name their account (source_relation first) and are kept
    (store_failures, dbt_project.yml). The staging tests are `warn`, so dbt skips no model
    downstream of a failure: that would stop every account's marts. Instead the model
    guestdata_account_status, built after every staging model and its tests and before any mart,
    holds each account that failed a staging test in this build or whose load failed
    (GUESTDATA_FAILED_LOADS, set by the accounts DAG). A held account's marts keep the rows of
    its last good build: the incremental marts neither delete nor insert its keys
    (get_incremental_guestdata_upsert_sql), the table marts copy its rows from their last build
    (held_accounts_kept). The next build that finds it healthy recomputes its keys whole
    (accounts_new_or_renamed: it is catching up). Every other account's marts update. At the
    end the build fails naming the held accounts (fail_if_accounts_held), so the task fails with
    the others already current. -#}

{#- The raw schemas (lower case) whose load failed in this run: the var guestdata_failed_loads,
    else GUESTDATA_FAILED_LOADS, comma-separated. -#}
{% macro failed_loads() %}
  {% set listed = var('guestdata_failed_loads', env_var('GUESTDATA_FAILED_LOADS', '')) %}
  {% set names = listed if listed is not string else listed.split(',') %}
  {{ return(names | map('trim') | map('lower') | reject('equalto', '') | list) }}
{% endmacro %}

{#- The tables the tests keep their failing rows in (store_failures), by lower-case name: one
    catalog query, not the relation cache, which knows no table a test made during the run. -#}
{% macro stored_failures() %}
  {% set tests = graph.nodes.values() | selectattr('resource_type', 'equalto', 'test') | list %}
  {% if not tests %}
    {{ return({}) }}
  {% endif %}
  {% set audit = tests[0] %}
  {% set tables = run_query(
      "select table_name from " ~ adapter.quote(audit.database) ~ ".information_schema.tables"
      ~ " where lower(table_schema) = lower('" ~ audit.schema ~ "')") %}
  {% set found = {} %}
  {% for name in tables.columns[0].values() %}
    {% do found.update({name | lower: api.Relation.create(
        database=audit.database, schema=audit.schema, identifier=name)}) %}
  {% endfor %}
  {{ return(found) }}
{% endmacro %}

{#- A staging test: its failure holds its account. -#}
{% macro is_staging_test(test) %}
  {{ return(test.fqn[1:2] == ['staging']) }}
{% endmacro %}

{#- What a failed test checks, as a reader says it: model.column: test. -#}
{% macro check_name(test) -%}
  {%- set parent = graph.nodes.get(test.attached_node) if test.attached_node else none -%}
  {%- set on = (parent.name if parent else '') ~ ('.' ~ test.column_name if test.column_name else '') -%}
  {%- set kind = test.test_metadata.name if test.test_metadata else test.name -%}
  {{ return(on ~ ': ' ~ kind if on else kind) }}
{%- endmacro %}

{#- The staging tests' failing rows in this build, per account: (source_relation, reason,
    failing_rows), one select per stored table, none while they are empty. -#}
{% macro staging_check_failures() -%}
  {%- set selects = [
      "select cast(null as " ~ dbt.type_string() ~ ") as source_relation, cast(null as "
      ~ dbt.type_string() ~ ") as reason, cast(null as " ~ dbt.type_bigint() ~ ") as failing_rows where 1 = 0"] -%}
  {%- set stored = stored_failures() if execute else {} -%}
  {%- for test in (graph.nodes.values() if execute else []) if test.resource_type == 'test'
        and is_staging_test(test) and (test.alias | lower) in stored -%}
    {%- do selects.append(
        "select lower(source_relation), '" ~ check_name(test) ~ "', count(*) from "
        ~ stored[test.alias | lower] ~ " group by lower(source_relation)") -%}
  {%- endfor -%}
  {{ selects | join('\nunion all\n') }}
{%- endmacro %}

{#- guestdata_account_status's relation, from the graph: hooks cannot ref(), and a model that
    reads it refs it at its top (depends_on). -#}
{% macro account_status_relation() %}
  {% set node = graph.nodes.values() | selectattr('name', 'equalto', 'guestdata_account_status') | first %}
  {{ return(api.Relation.create(database=node.database, schema=node.schema, identifier=node.alias)) }}
{% endmacro %}

{#- The accounts held in this build (raw schemas, lower case), once guestdata_account_status is
    built; [] before that and while compiling. -#}
{% macro held_accounts() %}
  {% if not execute %}
    {{ return([]) }}
  {% endif %}
  {% set status = account_status_relation() %}
  {% if adapter.get_relation(database=status.database, schema=status.schema, identifier=status.identifier) is none %}
    {{ return([]) }}
  {% endif %}
  {% set found = run_query("select source_relation from " ~ status ~ " where status = 'held' order by 1") %}
  {{ return(found.columns[0].values() | list) }}
{% endmacro %}

{#- `and source_relation not in (...)` of the held accounts (nothing when none is). -#}
{% macro not_held(held, column='source_relation') -%}
  {%- if held %} and {{ column }} not in ('{{ held | join("', '") }}'){% endif -%}
{%- endmacro %}

{#- A table mart's last statement: its rows built now (the CTE `built`), but a held account's
    rows as its last build left them (none before its first good build). A mart whose columns a
    release changed cannot keep them: build it with no account held, or with --full-refresh. -#}
{% macro held_accounts_kept(built) -%}
  {%- set held = held_accounts() -%}
  {%- set last = adapter.get_relation(database=this.database, schema=this.schema, identifier=this.identifier) if held else none -%}
select * from {{ built }}
where 1 = 1{{ not_held(held) }}
  {%- if last is not none %}
union all
select * from {{ last }}
where source_relation in ('{{ held | join("', '") }}')
  {%- endif %}
{%- endmacro %}

{#- An incremental mart's post-hook, on its first build (no last good rows to keep): a held
    account's rows, which the build just wrote, leave it. -#}
{% macro held_accounts_first_built_removed() -%}
  {%- set held = held_accounts() -%}
  {%- if held -%}
delete from {{ this }}
where source_relation in ('{{ held | join("', '") }}') and built_at = {{ build_started_at() }}
  {%- else -%}
select 1
  {%- endif -%}
{%- endmacro %}

{#- guestdata_account_status was built by this invocation (a build of other models leaves it
    as an earlier build left it, and says nothing of it). -#}
{% macro account_status_built(results) %}
  {{ return(execute and results | selectattr('node.name', 'equalto', 'guestdata_account_status')
                                | selectattr('status', 'equalto', 'success') | list | length > 0) }}
{% endmacro %}

{#- on-run-end: for each account, the checks on its marts that failed or warned in this build
    (any test outside staging), into guestdata_account_status; then a line per held account and
    per account with a failed mart check in the log. -#}
{% macro report_account_status(results) %}
  {% if not account_status_built(results) %}
    {{ return('') }}
  {% endif %}
  {% set status = account_status_relation() %}
  {% set selects = [] %}
  {% set stored = stored_failures() %}
  {% for result in results if result.node.resource_type == 'test' and result.status in ('fail', 'warn')
        and not is_staging_test(result.node) and (result.node.alias | lower) in stored %}
    {% do selects.append("select lower(source_relation) as source_relation, '" ~ check_name(result.node)
                         ~ " (" ~ result.status ~ ")' as reason, count(*) as failing_rows from "
                         ~ stored[result.node.alias | lower] ~ " group by lower(source_relation)") %}
  {% endfor %}
  {% if selects %}
    {% do adapter.execute(
        "update " ~ status ~ " set mart_check_failures = failing.reasons from (select source_relation, "
        ~ dbt.listagg("reason || ': ' || cast(failing_rows as " ~ dbt.type_string() ~ ") || ' rows'", "'; '", "order by reason")
        ~ " as reasons from (" ~ selects | join(' union all ') ~ ") as checks group by source_relation) as failing"
        ~ " where " ~ status ~ ".source_relation = failing.source_relation", auto_begin=true) %}
    {% do adapter.commit() %}
  {% endif %}
  {% set rows = run_query(
      "select source_relation, account_name, status, held_reasons, marts_built_at, mart_check_failures from "
      ~ status ~ " where status = 'held' or mart_check_failures is not null order by source_relation") %}
  {% for row in rows.rows %}
    {% set account = (row[1] or row[0]) ~ ' (' ~ row[0] ~ ')' %}
    {% if row[2] == 'held' %}
      {{ log('ACCOUNT HELD ' ~ account ~ ': ' ~ row[3] ~ '. Its marts keep the rows of '
             ~ ('the build of ' ~ row[4] if row[4] else 'no build yet') ~ '; every other account is current.', info=True) }}
    {% endif %}
    {% if row[5] %}
      {{ log('ACCOUNT CHECKS ' ~ account ~ ': ' ~ row[5], info=True) }}
    {% endif %}
  {% endfor %}
  {{ return('') }}
{% endmacro %}

{#- on-run-end, last: the build fails when it held an account (the policy: docs/transform.md). -#}
{% macro fail_if_accounts_held(results) %}
  {% if not account_status_built(results) %}
    {{ return('') }}
  {% endif %}
  {% set held = held_accounts() %}
  {% if held %}
    {{ exceptions.raise_compiler_error(
        'GUESTDATA ACCOUNTS HELD: ' ~ held | join(', ') ~ ' (' ~ account_status_relation()
        ~ ' says why); every other account\'s marts are current') }}
  {% endif %}
  {{ return('') }}
{% endmacro %}
