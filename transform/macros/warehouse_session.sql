{#- PostgreSQL compiles a query to machine code (JIT) when its estimated cost passes jit_above_cost.
    The models' estimates (a union of every account's raw table, a spine of days, common tables)
    are far above what they read: compiling took 3.0 s of the 3.4 s of the large account's
    nightly fct_venue_daily, which reads 80 venue-days. A model's pre-hook turns it off for that
    model's transaction only (`set local`); other warehouses have nothing to turn off. -#}
{% macro without_jit() %}
  {{ return(adapter.dispatch('without_jit', 'guestdata')()) }}
{% endmacro %}

{% macro postgres__without_jit() -%}
  set local jit = off
{%- endmacro %}

{% macro default__without_jit() -%}
{%- endmacro %}

{#- PostgreSQL estimates the rows a window function's `newest_first = 1` keeps far too low (one
    where thousands remain), and then joins by nested loop, running the window again for every
    outer row: marketing_audience's nightly build on the medium account took 15.7 s for 3,218
    contacts (a full build 0.3 s). Its joins are all equalities, so hash and merge joins serve
    them at any size; a pre-hook of that model turns nested loops off for its transaction. -#}
{% macro without_nested_loops() %}
  {{ return(adapter.dispatch('without_nested_loops', 'guestdata')()) }}
{% endmacro %}

{% macro postgres__without_nested_loops() -%}
  set local enable_nestloop = off
{%- endmacro %}

{% macro default__without_nested_loops() -%}
{%- endmacro %}
