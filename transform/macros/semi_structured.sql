{#- JSON objects and arrays: target-postgres loads jsonb and native arrays, target-snowflake
    VARIANT/ARRAY. Each helper has a postgres__ and a default__ (Snowflake) form. -#}

{#- A JSON object's field as text, e.g. brand.programme_name. -#}
{% macro json_text(column, key) -%}
  {{ return(adapter.dispatch('json_text', 'guestdata')(column, key)) }}
{%- endmacro %}

{% macro postgres__json_text(column, key) -%}
  ({{ column }} ->> '{{ key }}')
{%- endmacro %}

{% macro default__json_text(column, key) -%}
  cast(get({{ column }}, '{{ key }}') as {{ dbt.type_string() }})
{%- endmacro %}

{#- Number of elements of an array column; null stays null (site_ids null = every venue). -#}
{% macro array_size(column) -%}
  {{ return(adapter.dispatch('array_size', 'guestdata')(column)) }}
{%- endmacro %}

{% macro postgres__array_size(column) -%}
  cardinality({{ column }})
{%- endmacro %}

{% macro default__array_size(column) -%}
  array_size({{ column }})
{%- endmacro %}

{#- Aggregate distinct values into a sorted array. -#}
{% macro array_agg_distinct_sorted(expression) -%}
  {{ return(adapter.dispatch('array_agg_distinct_sorted', 'guestdata')(expression)) }}
{%- endmacro %}

{% macro postgres__array_agg_distinct_sorted(expression) -%}
  array_agg(distinct {{ expression }} order by {{ expression }})
{%- endmacro %}

{% macro default__array_agg_distinct_sorted(expression) -%}
  array_agg(distinct {{ expression }}) within group (order by {{ expression }})
{%- endmacro %}

{#- Seconds from one instant to another (time to redeem). -#}
{% macro seconds_between(start, finish) -%}
  {{ return(adapter.dispatch('seconds_between', 'guestdata')(start, finish)) }}
{%- endmacro %}

{% macro postgres__seconds_between(start, finish) -%}
  cast(extract(epoch from ({{ finish }}) - ({{ start }})) as {{ dbt.type_bigint() }})
{%- endmacro %}

{% macro default__seconds_between(start, finish) -%}
  datediff(second, {{ start }}, {{ finish }})
{%- endmacro %}
