{#- The one place an instant becomes a London date (spec 4.4.2: a bare date is a
    Europe/London day, whatever the venue's time zone). Every *_on column comes from here. -#}
{% macro london_date(instant) -%}
  {{ return(adapter.dispatch('london_date', 'guestdata')(instant)) }}
{%- endmacro %}

{% macro postgres__london_date(instant) -%}
  cast(({{ instant }}) at time zone 'Europe/London' as date)
{%- endmacro %}

{#- Snowflake (and other warehouses with convert_timezone); instants are TIMESTAMP_TZ there. -#}
{% macro default__london_date(instant) -%}
  cast(convert_timezone('Europe/London', {{ instant }}) as date)
{%- endmacro %}
