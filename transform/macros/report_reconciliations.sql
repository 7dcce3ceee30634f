{#- on-run-end: for each reconciliation test that warned or failed, say what to do. dbt prints
    only "Got N results"; the advice lives in the test's meta. Which accounts fail it is said once
    for every test, by report_account_status (macros/account_status.sql): `ACCOUNT CHECKS`. -#}
{% macro guestdata_report_reconciliations(results) %}
  {% if execute %}
    {% for result in results %}
      {% set advice = (result.node.config.meta or {}).get('advice') %}
      {% if advice and result.status in ('fail', 'warn', 'error') %}
        {{ log('RECONCILIATION ' ~ result.status | upper ~ ' ' ~ result.node.name ~ ' ('
               ~ result.failures ~ ' rows): ' ~ advice, info=True) }}
      {% endif %}
    {% endfor %}
  {% endif %}
{% endmacro %}
