{#- Erasure on request, the shared pieces (the commands: erasure.sql; the runbook: docs/security.md
    "Erasure"). A person is known here only by salted hashes of their contacts and ids, kept in
    <raw schema>.guestdata_erasures. One hash function everywhere: md5(salt || value) in SQL,
    local_md5(salt ~ value) in dbt's own process, so the identifier a user gives is hashed before
    any SQL is written and never reaches the warehouse, its query history or dbt's logs.

    The salt is made by the warehouse on first use and kept in a one-row table beside
    guestdata_erasures (guestdata_erasure_salt) that only the pipeline's role may read: SQL names
    that table and never contains the value, so it is in no compiled file, log or query history.
    Only erase_person reads it into dbt's process, to hash the identifier there. -#}

{#- What an erased contact field holds: all asterisks, as the API masks (spec 2.8), so every rule
    that keeps masked contacts out of the audience keeps these out too. -#}
{% macro erasure_placeholder() -%}
'********'
{%- endmacro %}

{% macro erasure_table_name() -%}
guestdata_erasures
{%- endmacro %}

{% macro erasure_salt_table_name() -%}
guestdata_erasure_salt
{%- endmacro %}

{#- The salt as an SQL expression: the one row of the salt table, never its value. -#}
{% macro erasure_salt_sql(context) -%}
(select salt from {{ context.salt_table }})
{%- endmacro %}

{#- A fresh salt, made inside the warehouse (two random UUIDs: 244 random bits, as hex). -#}
{% macro erasure_new_salt_sql() -%}
  {{ return(adapter.dispatch('erasure_new_salt_sql', 'guestdata')()) }}
{%- endmacro %}

{% macro postgres__erasure_new_salt_sql() -%}
replace(cast(gen_random_uuid() as text), '-', '') || replace(cast(gen_random_uuid() as text), '-', '')
{%- endmacro %}

{% macro default__erasure_new_salt_sql() -%}
replace(uuid_string(), '-', '') || replace(uuid_string(), '-', '')
{%- endmacro %}

{#- Stored beside every entry: a replaced salt table would match nobody, silently. -#}
{% macro erasure_salt_check_sql(context) -%}
md5({{ erasure_salt_sql(context) }} || ':guestdata-erasure-salt-check')
{%- endmacro %}

{#- The same normal forms in SQL (rows) and in Jinja (the identifier a user gives). -#}
{% macro erasure_email_sql(expression) -%}
lower(trim({{ expression }}))
{%- endmacro %}

{% macro erasure_phone_sql(expression) -%}
replace(replace(trim({{ expression }}), ' ', ''), '-', '')
{%- endmacro %}

{% macro erasure_id_sql(expression) -%}
cast({{ expression }} as {{ dbt.type_string() }})
{%- endmacro %}

{% macro erasure_hash_sql(normalised_expression, context) -%}
md5({{ erasure_salt_sql(context) }} || {{ normalised_expression }})
{%- endmacro %}

{#- A contact value that may be hashed: present, and not masked (a mask such as j****@x.com is
    shared by many people; our own placeholder is all asterisks). -#}
{% macro erasure_usable_sql(expression) -%}
(nullif(trim({{ expression }}), '') is not null and {{ expression }} not like '%*%')
{%- endmacro %}

{#- Where the loader writes: the database and schema of the `guestdata` source. -#}
{% macro erasure_raw_location(schema=none) %}
  {% for node in graph.sources.values() %}
    {% if node.source_name == 'guestdata' and node.name == 'guests' %}
      {{ return({'database': node.database, 'schema': schema or node.schema}) }}
    {% endif %}
  {% endfor %}
  {{ exceptions.raise_compiler_error("the guestdata source is not defined") }}
{% endmacro %}

{#- A raw table (or the suppression table beside them) if it exists, else none. -#}
{% macro erasure_raw_relation(identifier, schema=none) %}
  {% set raw = erasure_raw_location(schema) %}
  {{ return(adapter.get_relation(database=raw.database, schema=raw.schema, identifier=identifier)) }}
{% endmacro %}

{#- A model of this project if it has been built, else none. -#}
{% macro erasure_model_relation(name) %}
  {% for node in graph.nodes.values() %}
    {% if node.resource_type == 'model' and node.package_name == 'guestdata' and node.name == name %}
      {{ return(adapter.get_relation(database=node.database, schema=node.schema, identifier=node.alias)) }}
    {% endif %}
  {% endfor %}
  {{ return(none) }}
{% endmacro %}

{#- The erasure context of every account schema that holds erasure requests, from two catalog
    queries (the suppression tables, the salt tables), not two look-ups per account: a request is
    recorded in the raw schema of the account it was made to, and acts on that account's rows
    only (ids are not unique across accounts). -#}
{% macro erasure_contexts() %}
  {% set salted = raw_relations(erasure_salt_table_name()) | map(attribute='schema') | list %}
  {% set contexts = [] %}
  {% for relation in raw_relations(erasure_table_name()) %}
    {% set raw = erasure_raw_location(relation.schema) %}
    {% set table = api.Relation.create(database=raw.database, schema=relation.schema,
                                       identifier=erasure_table_name(), type='table') %}
    {% if relation.schema not in salted %}
      {{ exceptions.raise_compiler_error(
          table ~ " exists without " ~ erasure_salt_table_name() ~ " beside it: its entries were "
          ~ "recorded under GUESTDATA_ERASURE_SALT (tap-guestdata 0.1), which is no longer read. "
          ~ "Re-record the requests still open under the warehouse's own salt: delete the entries, "
          ~ "then run the erase command again for each (docs/security.md, The salt).") }}
    {% endif %}
    {% do contexts.append({'table': table, 'account': relation.schema | lower, 'listed': true,
        'salt_table': api.Relation.create(database=raw.database, schema=relation.schema,
                                          identifier=erasure_salt_table_name(), type='table')}) %}
  {% endfor %}
  {{ return(contexts) }}
{% endmacro %}

{#- A WHERE-clause condition: the row's email, phone or id is suppressed. Snowflake allows IN
    (subquery) only in WHERE clauses, so models use it in a CTE, never in a select list. -#}
{% macro erasure_match(context, email=none, phone=none, row_id=none, id_kind=none) -%}
  {%- if context.table is none -%}
    (1 = 0)
  {%- else -%}
    {%- set checks = [] -%}
    {%- if email -%}
      {%- do checks.append((erasure_email_sql(email), 'email')) -%}
    {%- endif -%}
    {%- if phone -%}
      {%- do checks.append((erasure_phone_sql(phone), 'phone')) -%}
    {%- endif -%}
    {%- if row_id -%}
      {%- do checks.append((erasure_id_sql(row_id), id_kind)) -%}
    {%- endif -%}
    ({%- for normalised, kind in checks %}
      {{ 'or ' if not loop.first }}{{ erasure_hash_sql(normalised, context) }} in (
        select identifier_hash from {{ context.table }} where kind = '{{ kind }}'
      )
    {%- endfor %})
  {%- endif -%}
{%- endmacro %}

{#- For a staging model: `rows` with is_erased, true for a person erased on request, whether the
    erasure was already applied to the raw row (its email is the placeholder) or not yet (its
    hashes are suppressed, e.g. a load wrote the person again while dbt ran). -#}
{% macro with_erasure_flag(rows, key, email, phone, id_kind) -%}
select {{ rows }}.*, erased.erased_key is not null as is_erased
from {{ rows }}
left join (
    select distinct source_relation as erased_account, {{ key }} as erased_key
    from {{ rows }}
    where {{ email }} = {{ erasure_placeholder() }}
    {%- for context in erasure_contexts() %}
        or (lower(source_relation) = '{{ context.account }}'
            and {{ erasure_match(context, email=email, phone=phone, row_id=key, id_kind=id_kind) }})
    {%- endfor %}
) as erased
    on erased.erased_account = {{ rows }}.source_relation
    and erased.erased_key = {{ rows }}.{{ key }}
{%- endmacro %}
