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
