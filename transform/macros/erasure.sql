{#- Erasure on request (docs/security.md "Erasure"). Three commands, the same SQL on PostgreSQL
    and Snowflake:

      GUESTDATA_ERASE_IDENTIFIER='person@example.com' dbt run-operation erase_person
      GUESTDATA_ERASE_IDENTIFIER='1234' dbt run-operation erase_person --args '{kind: member_id}'
      dbt run-operation release_erasure --args '{request_hash: <hash from the audit line>}'

    and apply_erasures, which every dbt build runs first (dbt_project.yml on-run-start), so a
    person a later sync loads again is erased again before any model reads them. The identifier
    comes from the environment, not --args: dbt writes its arguments into logs/dbt.log and
    target/run_results.json. -#}

{#- Every table that can hold an erased person's contact, and what erasing does to its rows,
    from the YAML `meta: erasure` of the sources (_sources.yml) and models (_staging.yml,
    _marts.yml). Guest rows keep the arrival (venue, time, consent) and lose the person, so visits
    still add up to the API's /stats; member rows are anonymised as the API anonymises them (spec
    2.8, 3), so ledger lines, rewards and redemptions keep their member. A raw table's personal
    fields and what they become come from the stream catalog (personal_fields.sql), plus its
    `also_set`; a model states its own `set`. Values: placeholder, null, now (anonymised_at if
    unset), else an SQL expression. Raw tables also say which rows still carry their own contact
    (`own_contact`): a member anonymised at the vendor holds only asterisks, which erasure_record
    never suppresses. Raw tables first, then staging, then the marts. -#}
{% macro erasure_targets() %}
  {% set targets = [] %}
  {% for source in graph.sources.values() if source.package_name == 'guestdata' %}
    {% set meta = source_meta(source) %}
    {% if meta.erasure %}
      {% set assignments = erased_personal_fields(source.name) %}
      {% do assignments.update(erasure_meta_values(meta.erasure.get('also_set', {}))) %}
      {% set target = {'name': source.name, 'raw': true, 'set': assignments} %}
      {% do target.update(meta.erasure) %}
      {% do targets.append(target) %}
    {% endif %}
  {% endfor %}
  {% set models = [] %}
  {% for node in graph.nodes.values() if node.resource_type == 'model' and node.package_name == 'guestdata' %}
    {% set meta = node.config.meta or node.meta or {} %}
    {% if meta.erasure %}
      {#- lineage order: staging before the marts built from it -#}
      {% set target = {'name': node.name, 'raw': false,
                       'order': ('0' if 'staging' in node.fqn else '1') ~ node.name} %}
      {% do target.update(meta.erasure) %}
      {% do target.update({'set': erasure_meta_values(meta.erasure.get('set', {}))}) %}
      {% do models.append(target) %}
    {% endif %}
  {% endfor %}
  {{ return(targets + models | sort(attribute='order')) }}
{% endmacro %}

{#- A stream's personal fields (the stream catalog) and what erasing leaves in each. -#}
{% macro erased_personal_fields(stream) %}
  {{ return(erasure_meta_values(personal_fields()[stream])) }}
{% endmacro %}

{#- A source table's YAML meta (under `config:` or beside it). -#}
{% macro source_meta(source) %}
  {{ return((source.config.meta if source.config is defined else none) or source.meta or {}) }}
{% endmacro %}

{#- YAML meta's words as erasure_update_sql takes them: placeholder -> the placeholder's SQL. -#}
{% macro erasure_meta_values(assignments) %}
  {% set values = {} %}
  {% for column, value in assignments.items() %}
    {% do values.update({column: erasure_placeholder() if value == 'placeholder' else value}) %}
  {% endfor %}
  {{ return(values) }}
{% endmacro %}

{% macro erase_person(kind=none, identifier=none) %}
  {% if identifier is not none %}
    {{ exceptions.raise_compiler_error(
        "erase_person takes the identifier from GUESTDATA_ERASE_IDENTIFIER, never from --args: "
        ~ "dbt has just written these --args into logs/dbt.log and target/run_results.json, so "
        ~ "delete both files, then run again with the variable set.") }}
  {% endif %}
  {% if not execute %}
    {{ return('') }}
  {% endif %}
  {% set request = erasure_normalise(env_var('GUESTDATA_ERASE_IDENTIFIER', ''), kind) %}
  {% set context = erasure_create_tables() %}
  {% do erasure_check_salt(context) %}
  {#- The identifier is hashed here, in dbt's process: the salt is read into it (the query names
      the table), so neither the identifier nor the salt is ever in an SQL text. -#}
  {% set salt = run_query('select salt from ' ~ context.salt_table).columns[0].values()[0] %}
  {% set identifier_hash = local_md5(salt ~ request.value) %}
  {% set request_hash = local_md5(salt ~ request.kind ~ ':' ~ request.value) %}
  {% set identifiers = erasure_record(context, request_hash, identifier_hash, request.kind) %}
  {% set counts = erasure_apply([context]) %}
  {% do adapter.commit() %}
  {{ log('erasure ' ~ request_hash ~ ' (' ~ request.kind ~ ', ' ~ identifiers
         ~ ' identifiers suppressed): ' ~ erasure_counts_text(counts), info=True) }}
{% endmacro %}

{#- on-run-start: re-erase whoever a sync brought back, in every account that holds erasure
    requests (each in its own raw schema); a no-op without any suppression table. Bounded by the
    accounts' watermarks (hook_watermarks), raw tables and models alike: a person a sync brought
    back is in a raw row loaded since the last build, and in a model row built from one. The
    accounts are checked together: their salts and requests in one query per batch, each model
    table updated once per batch of accounts, not once per account. -#}
{% macro apply_erasures(on_run_start=false) %}
  {% if not execute or (on_run_start and flags.WHICH not in ['build', 'run', 'test', 'retry']) %}
    {{ return('') }}
  {% endif %}
  {% set contexts = erasure_contexts() %}
  {% if not contexts %}
    {{ return('') }}
  {% endif %}
  {% set requests = erasure_check_salts(contexts) %}
  {% set counts = erasure_apply(contexts, hook_watermarks()) %}
  {% do adapter.commit() %}
  {{ log('erasures: ' ~ requests ~ ' requests on record; erased again: '
         ~ erasure_counts_text(counts), info=True) }}
  {{ return('') }}
{% endmacro %}

{#- Once the vendor has erased the person too (the API no longer serves them), drop their
    suppression entries, or they stay suppressed for good (a later sign-up included). -#}
{% macro release_erasure(request_hash) %}
  {% if not execute %}
    {{ return('') }}
  {% endif %}
  {% if not modules.re.fullmatch('[0-9a-f]{32}', request_hash | string) %}
    {{ exceptions.raise_compiler_error("request_hash: the 32 hex digits after `erasure` in the audit line") }}
  {% endif %}
  {% set table = erasure_raw_relation(erasure_table_name()) %}
  {% set released = 0 %}
  {% if table is not none %}
    {% set response, _ = adapter.execute(
        "delete from " ~ table ~ " where request_hash = '" ~ request_hash ~ "'", auto_begin=true) %}
    {% set released = response.rows_affected %}
    {% do adapter.commit() %}
  {% endif %}
  {{ log('erasure ' ~ request_hash ~ ' released: ' ~ released ~ ' identifiers no longer '
         ~ 'suppressed (a sync loads the person again while the API still serves them)', info=True) }}
{% endmacro %}

{#- The identifier in the normal form rows are hashed in; messages never repeat it. -#}
{% macro erasure_normalise(given, kind) %}
  {% set value = given | trim %}
  {% if not value %}
    {{ exceptions.raise_compiler_error(
        "set GUESTDATA_ERASE_IDENTIFIER to the person's email, phone (E.164), guest id or member id") }}
  {% endif %}
  {% if kind is none %}
    {% set kind = 'email' if '@' in value else 'phone' if value.startswith('+') else none %}
  {% endif %}
  {% if kind == 'email' %}
    {% set value = value | lower %}
    {% set valid = modules.re.fullmatch('[^@\\s]+@[^@\\s]+', value) %}
  {% elif kind == 'phone' %}
    {% set value = modules.re.sub('[\\s().-]', '', value) %}
    {% set valid = modules.re.fullmatch('\\+[1-9][0-9]{6,14}', value) %}
  {% elif kind in ['guest_id', 'member_id'] %}
    {% set valid = modules.re.fullmatch('[0-9]+', value) %}
    {% set value = (value | int) | string if valid else value %}
  {% else %}
    {{ exceptions.raise_compiler_error(
        "say what the identifier is: --args '{kind: guest_id}' or '{kind: member_id}' (an email "
        ~ "or an E.164 phone is recognised; kind is one of email, phone, guest_id, member_id)") }}
  {% endif %}
  {% if not valid %}
    {{ exceptions.raise_compiler_error(
        "GUESTDATA_ERASE_IDENTIFIER is not a valid " ~ kind ~ " (value not shown)") }}
  {% endif %}
  {{ return({'kind': kind, 'value': value}) }}
{% endmacro %}

{#- The suppression table and the salt table beside it, created on first use; the salt is made by
    the warehouse, once, and only the pipeline's role (the tables' owner) may read it. -#}
{% macro erasure_create_tables() %}
  {% set raw = erasure_raw_location() %}
  {% set table = api.Relation.create(database=raw.database, schema=raw.schema,
                                     identifier=erasure_table_name(), type='table') %}
  {% set salt_table = api.Relation.create(database=raw.database, schema=raw.schema,
                                          identifier=erasure_salt_table_name(), type='table') %}
  {% do adapter.create_schema(table) %}
  {% call statement('erasure_create_table', auto_begin=true) %}
    create table if not exists {{ table }} (
        request_hash {{ dbt.type_string() }},
        identifier_hash {{ dbt.type_string() }},
        kind {{ dbt.type_string() }},
        salt_check {{ dbt.type_string() }},
        requested_at {{ dbt.type_timestamp() }}
    )
  {% endcall %}
  {% call statement('erasure_create_salt_table', auto_begin=true) %}
    create table if not exists {{ salt_table }} (salt {{ dbt.type_string() }})
  {% endcall %}
  {% do erasure_keep_salt_private(salt_table) %}
  {% call statement('erasure_make_salt', auto_begin=true) %}
    insert into {{ salt_table }} (salt)
    select {{ erasure_new_salt_sql() }}
    where not exists (select 1 from {{ salt_table }})
  {% endcall %}
  {{ return({'table': table, 'salt_table': salt_table, 'account': raw.schema | lower}) }}
{% endmacro %}

{#- PostgreSQL: no grant reaches the salt table through PUBLIC (a schema's default privileges
    may have given one). Snowflake: a table is its owner role's until granted; docs/security.md
    says which future grants to leave off. -#}
{% macro erasure_keep_salt_private(salt_table) %}
  {{ return(adapter.dispatch('erasure_keep_salt_private', 'guestdata')(salt_table)) }}
{% endmacro %}

{% macro postgres__erasure_keep_salt_private(salt_table) %}
  {% call statement('erasure_keep_salt_private', auto_begin=true) %}
    revoke all on {{ salt_table }} from public
  {% endcall %}
{% endmacro %}

{% macro default__erasure_keep_salt_private(salt_table) %}
{% endmacro %}

{% macro erasure_check_salt(context) %}
  {% do erasure_check_salts([context]) %}
{% endmacro %}

{#- Every context's entries were recorded under its own salt table's salt (else they match
    nobody); returns how many requests they hold in all. One query per batch of accounts. -#}
{% macro erasure_check_salts(contexts) %}
  {% set parts = [] %}
  {% for context in contexts %}
    {% set sql = "select '" ~ context.salt_table ~ "' as salt_table,"
        ~ " (select count(distinct request_hash) from " ~ context.table ~ ") as requests,"
        ~ " (select count(*) from " ~ context.table ~ " where salt_check <> "
        ~ erasure_salt_check_sql(context) ~ ") as others" %}
    {% do parts.append({'sql': sql, 'size': sql | length}) %}
  {% endfor %}
  {% set requests = [] %}
  {% for batch in batches_within(parts, statement_batch_bytes()) %}
    {% for salt_table, held, others in run_query(union_all(batch | map(attribute='sql') | list)).rows %}
      {% if others | int > 0 %}
        {{ exceptions.raise_compiler_error(
            others ~ " erasure entries were recorded under another salt than "
            ~ salt_table ~ " holds, so they would match nobody: restore the table from a "
            ~ "backup, or re-record the requests still open (docs/security.md, The salt).") }}
      {% endif %}
      {% do requests.append(held | int) %}
    {% endfor %}
  {% endfor %}
  {{ return(requests | sum) }}
{% endmacro %}

{#- Suppress the identifier and every contact and id on the rows it names (one step: an email's
    rows give the phone, a member id's row gives the email), masked values never. Returns how
    many identifiers this request holds. -#}
{% macro erasure_record(context, request_hash, identifier_hash, kind) %}
  {% set found = ["select '" ~ identifier_hash ~ "' as identifier_hash, '" ~ kind ~ "' as kind"] %}
  {% for people in erasure_targets() if people.raw %}
    {% set relation = erasure_raw_relation(people.name) %}
    {% set named_by = {'email': erasure_email_sql(people.email), 'phone': erasure_phone_sql(people.phone),
                       people.id_kind: erasure_id_sql(people.id)}.get(kind) %}
    {% if relation is not none and named_by %}
      {% set rows = relation ~ " where " ~ erasure_hash_sql(named_by, context) ~ " = '"
                    ~ identifier_hash ~ "' and " ~ people.own_contact %}
      {% do found.append("select " ~ erasure_hash_sql(erasure_email_sql(people.email), context)
                         ~ ", 'email' from " ~ rows ~ " and " ~ erasure_usable_sql(people.email)) %}
      {% do found.append("select " ~ erasure_hash_sql(erasure_phone_sql(people.phone), context)
                         ~ ", 'phone' from " ~ rows ~ " and " ~ erasure_usable_sql(people.phone)) %}
      {% do found.append("select " ~ erasure_hash_sql(erasure_id_sql(people.id), context)
                         ~ ", '" ~ people.id_kind ~ "' from " ~ rows) %}
    {% endif %}
  {% endfor %}
  {% call statement('erasure_record', auto_begin=true) %}
    insert into {{ context.table }} (request_hash, identifier_hash, kind, salt_check, requested_at)
    select '{{ request_hash }}', found.identifier_hash, found.kind,
        salt.salt_check, {{ dbt.current_timestamp_in_utc_backcompat() }}
    from ({{ found | join('\n    union all\n    ') }}) as found
    cross join (select {{ erasure_salt_check_sql(context) }} as salt_check) as salt
    where not exists (
        select 1 from {{ context.table }} as known
        where known.request_hash = '{{ request_hash }}'
            and known.identifier_hash = found.identifier_hash
            and known.kind = found.kind
    )
    group by found.identifier_hash, found.kind, salt.salt_check
  {% endcall %}
  {{ return(run_query("select count(*) from " ~ context.table ~ " where request_hash = '"
                      ~ request_hash ~ "'").columns[0].values()[0]) }}
{% endmacro %}

{#- Erase every suppressed person of `contexts` (erasure_contexts) from every table that exists.
    Only rows not yet in their erased form change, so the counts are rows changed and a second
    run changes (and counts) nothing. `watermarks` (hook_watermarks: {account: since}): of an
    account with one, only the rows loaded since then, in the raw tables and the models (their
    loaded_at); every row of the others. A raw table: an update per account (each account's is
    its own table; on PostgreSQL a batch of them per statement), its columns from one catalog
    query for every account. A model: one update per batch of accounts (statement_batch_bytes),
    each account matched by its own requests (ids collide across accounts). -#}
{% macro erasure_apply(contexts, watermarks={}) %}
  {% set counts = {} %}
  {% for target in erasure_targets() %}
    {% set changed, changes = [], [] %}
    {% if target.raw %}
      {% set raw_columns = {} %}
      {% for relation in raw_relations(target.name) %}
        {% do raw_columns.update({relation.schema | lower: relation}) %}
      {% endfor %}
      {% for context in contexts %}
        {% set found = raw_columns.get(context.account) %}
        {#- erase_person's raw schema may be outside the accounts' pattern (GUESTDATA_PG_SCHEMA):
            looked up on its own; an account's (erasure_contexts) lacks a table not found -#}
        {% if found is not none %}
          {% set relation = api.Relation.create(database=context.table.database,
              schema=found.schema, identifier=target.name, type='table') %}
        {% else %}
          {% set relation = none if context.get('listed')
                            else erasure_raw_relation(target.name, context.account) %}
        {% endif %}
        {% if relation is not none %}
          {% set match = loaded_since(watermarks.get(context.account)) ~ " and "
                         ~ erasure_target_match(context, target) %}
          {% do changes.append(erasure_change_sql(relation, target, match,
                                                  none if found is none else found.columns)) %}
        {% endif %}
      {% endfor %}
      {% if changes %}
        {% do changed.append(erasure_run_changes(changes)) %}
      {% endif %}
    {% else %}
      {% set relation = erasure_model_relation(target.name) %}
      {% if relation is not none %}
        {% set columns = adapter.get_columns_in_relation(relation) | map(attribute='name') | list %}
        {% set parts = [] %}
        {% for context in contexts %}
          {% set sql = "(lower(source_relation) = '" ~ context.account ~ "' and "
              ~ loaded_since(watermarks.get(context.account), 'loaded_at') ~ " and "
              ~ erasure_target_match(context, target) ~ ")" %}
          {% do parts.append({'sql': sql, 'size': sql | length}) %}
        {% endfor %}
        {% for batch in batches_within(parts, statement_batch_bytes()) %}
          {% set match = "(" ~ batch | map(attribute='sql') | join("\n or ") ~ ")" %}
          {% set change = erasure_change_sql(relation, target, match, columns) %}
          {% do changed.append(erasure_run_changes([change])) %}
        {% endfor %}
      {% endif %}
    {% endif %}
    {% if changed %}
      {% do counts.update({target.name: changed | sum}) %}
    {% endif %}
  {% endfor %}
  {{ return(counts) }}
{% endmacro %}

{#- A context's rows of an erasure target: its suppressed contacts and ids. -#}
{% macro erasure_target_match(context, target) %}
  {{ return(erasure_match(context, email=target.email, phone=target.phone,
                          row_id=target.get('id'), id_kind=target.get('id_kind'))) }}
{% endmacro %}

{#- The statement erasing the rows of `relation` that `match` finds, as `target` says (a
    delete, or an update to their erased form). -#}
{% macro erasure_change_sql(relation, target, match, columns=none) %}
  {% if target.get('delete') %}
    {{ return('delete from ' ~ relation ~ ' where ' ~ match) }}
  {% endif %}
  {{ return(erasure_update_sql(relation, target.set, match, columns=columns)) }}
{% endmacro %}

{#- Runs `changes` (erasure_change_sql); returns how many rows they changed in all. PostgreSQL:
    a batch of them per statement (postgres_changes_sql); elsewhere one statement each. -#}
{% macro erasure_run_changes(changes) %}
  {{ return(adapter.dispatch('erasure_run_changes', 'guestdata')(changes)) }}
{% endmacro %}

{% macro postgres__erasure_run_changes(changes) %}
  {% set parts, changed = [], [] %}
  {% for sql in changes %}
    {% do parts.append({'sql': sql, 'size': (sql | length) + 64}) %}
  {% endfor %}
  {% for batch in batches_within(parts, statement_batch_bytes()) %}
    {% set sql = postgres_changes_sql(batch | map(attribute='sql') | list) %}
    {% set _, found = adapter.execute(sql, auto_begin=true, fetch=true) %}
    {% do changed.append(found.rows[0][0] | int) %}
  {% endfor %}
  {{ return(changed | sum) }}
{% endmacro %}

{% macro default__erasure_run_changes(changes) %}
  {% set changed = [] %}
  {% for sql in changes %}
    {% set response, _ = adapter.execute(sql, auto_begin=true) %}
    {% do changed.append(response.rows_affected) %}
  {% endfor %}
  {{ return(changed | sum) }}
{% endmacro %}

{#- `columns`: the relation's, if the caller holds them (one catalog look-up fewer per table). -#}
{% macro erasure_update_sql(relation, assignments, match, columns=none) %}
  {% set columns = (adapter.get_columns_in_relation(relation) | map(attribute='name') | list
                    if columns is none else columns) | map('lower') | list %}
  {% set sets, changes = [], [] %}
  {% for column, value in assignments.items() if column in columns %}
    {% if value is none %}
      {% do sets.append(column ~ ' = null') %}
      {% do changes.append(column ~ ' is not null') %}
    {% elif value == 'now' %}
      {% do sets.append(column ~ ' = coalesce(' ~ column ~ ', ' ~ dbt.current_timestamp() ~ ')') %}
      {% do changes.append(column ~ ' is null') %}
    {% else %}
      {% do sets.append(column ~ ' = ' ~ value) %}
      {% do changes.append(column ~ ' is distinct from ' ~ value) %}
    {% endif %}
  {% endfor %}
  {{ return('update ' ~ relation ~ ' set ' ~ sets | join(', ') ~ ' where ' ~ match
            ~ ' and (' ~ changes | join(' or ') ~ ')') }}
{% endmacro %}

{% macro erasure_counts_text(counts) %}
  {% set parts = [] %}
  {% for name, count in counts.items() %}
    {% do parts.append(name ~ '=' ~ count) %}
  {% endfor %}
  {{ return(parts | join(' ') if parts else 'no table holds people yet') }}
{% endmacro %}
