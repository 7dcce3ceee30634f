{#- Which rows of an incremental model a `dbt build`'s generic data tests read (docs/transform-incremental.md). Every incremental model has built_at (when the build that last wrote
    the row started, macros/incremental.sql), and after each build the on-run-end hook records,
    per model, the newest build whose generic tests all passed (guestdata_tested_builds, in the
    models' schema). A build's tests then read the rows written after that: tonight's, and any a
    failed build left behind, so a failure is reported again until it is mended. The tests'
    keys are the rows' own (unique, not null, accepted values, a parent in the account), so the
    nightly tests cost the night's rows, not the history. `dbt test`, `--full-refresh`, a model
    this invocation did not build, and a model with no build on record: every row. Singular
    tests (the reconciliations) read their models whole: a standing difference warns every
    night. -#}

{#- dbt's get_where_subquery, overridden as dbt's docs show: the test's own `where`, and the
    rows not yet tested. -#}
{% macro get_where_subquery(relation) -%}
  {%- set filters = [config.get('where')] if config.get('where') else [] -%}
  {%- set untested = untested_rows_filter(relation) -%}
  {%- if untested -%}
    {%- do filters.append(untested) -%}
  {%- endif -%}
  {%- if filters -%}
    {%- do return('(select * from ' ~ relation ~ ' where ' ~ filters | join(' and ') ~ ') dbt_subquery') -%}
  {%- endif -%}
  {%- do return(relation) -%}
{%- endmacro %}

{#- Where the tested model's rows not yet tested are (none: read every row). A table built before
    built_at existed has no such column: every row is read until a --full-refresh adds it. -#}
{% macro untested_rows_filter(relation) %}
  {% if not execute or flags.WHICH != 'build' or flags.FULL_REFRESH %}
    {{ return(none) }}
  {% endif %}
  {% set tested = graph.nodes.get(model.attached_node) if model.attached_node else none %}
  {% set record = tested_builds_relation() %}
  {% if tested is none or tested.config.materialized != 'incremental' or record is none
        or tested.unique_id not in selected_resources %}
    {{ return(none) }}
  {% endif %}
  {% if not has_built_at(relation) %}
    {{ return(none) }}
  {% endif %}
  {{ return("built_at > coalesce((select max(tested_through) from " ~ record ~ " where model_name = '"
            ~ tested.name ~ "'), cast('1900-01-01 00:00:00+00:00' as " ~ instant_type() ~ "))") }}
{% endmacro %}

{#- Where the record of tested builds is kept. -#}
{% macro tested_builds_location() %}
  {{ return(api.Relation.create(database=target.database, schema=target.schema,
                                identifier='guestdata_tested_builds')) }}
{% endmacro %}

{#- The record of tested builds, or none before the first build has written it. -#}
{% macro tested_builds_relation() %}
  {% set location = tested_builds_location() %}
  {{ return(adapter.get_relation(database=location.database, schema=location.schema,
                                 identifier=location.identifier)) }}
{% endmacro %}

{#- on-run-end: each incremental model this build wrote, whose every generic test ran in it and
    passed, is tested through this build's start. -#}
{% macro record_tested_builds(results) %}
  {% if not execute or flags.WHICH != 'build' %}
    {{ return('') }}
  {% endif %}
  {% set statuses = {} %}
  {% for result in results %}
    {% do statuses.update({result.node.unique_id: result.status}) %}
  {% endfor %}
  {% set passed = [] %}
  {% for node in graph.nodes.values()
       if node.resource_type == 'model' and node.config.materialized == 'incremental'
       and statuses.get(node.unique_id) == 'success' %}
    {% set test_statuses = [] %}
    {% for test in graph.nodes.values()
         if test.resource_type == 'test' and test.attached_node == node.unique_id %}
      {% do test_statuses.append(statuses.get(test.unique_id)) %}
    {% endfor %}
    {% if test_statuses and test_statuses | reject('equalto', 'pass') | list | length == 0 %}
      {% do passed.append(node.name) %}
    {% endif %}
  {% endfor %}
  {% if passed %}
    {% set record = tested_builds_location() %}
    {% do adapter.execute('create table if not exists ' ~ record ~ ' (model_name '
                          ~ dbt.type_string() ~ ', tested_through ' ~ instant_type() ~ ')',
                          auto_begin=true) %}
    {% do adapter.execute('delete from ' ~ record ~ " where model_name in ('"
                          ~ passed | join("', '") ~ "')", auto_begin=true) %}
    {% set rows = [] %}
    {% for name in passed %}
      {% do rows.append("('" ~ name ~ "', " ~ build_started_at() ~ ")") %}
    {% endfor %}
    {% do adapter.execute('insert into ' ~ record ~ ' (model_name, tested_through) values '
                          ~ rows | join(', '), auto_begin=true) %}
    {% do adapter.commit() %}
  {% endif %}
  {{ return('') }}
{% endmacro %}
