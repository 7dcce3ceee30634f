{#- on-run-end: for each reconciliation test that warned or failed, say what to do, and for
    which accounts. dbt prints only "Got N results"; the advice lives in the test's meta, and one
    build holds every account, so the failing rows are counted per account (each reconciliation
    selects source_relation and account_name first). -#}
{% macro guestdata_report_reconciliations(results) %}
  {% if execute %}
    {% for result in results %}
      {% set advice = (result.node.config.meta or {}).get('advice') %}
      {% if advice and result.status in ('fail', 'warn', 'error') %}
        {{ log('RECONCILIATION ' ~ result.status | upper ~ ' ' ~ result.node.name ~ ' ('
               ~ result.failures ~ ' rows): ' ~ advice, info=True) }}
        {% if result.status in ('fail', 'warn') %}
          {{ guestdata_report_accounts(result) }}
        {% endif %}
      {% endif %}
    {% endfor %}
  {% endif %}
{% endmacro %}

{#- One line per account whose rows fail `result`'s test: its name (else its raw schema). -#}
{% macro guestdata_report_accounts(result) %}
  {% set failing = run_query(
      'select source_relation, account_name, count(*) from (' ~ result.node.compiled_code
      ~ ') as failing group by source_relation, account_name order by source_relation') %}
  {% for row in failing.rows %}
    {{ log('RECONCILIATION ' ~ result.status | upper ~ ' ' ~ result.node.name ~ ' account '
           ~ (row[1] or row[0]) ~ ' (' ~ row[0] ~ '): ' ~ row[2] ~ ' rows', info=True) }}
  {% endfor %}
{% endmacro %}
