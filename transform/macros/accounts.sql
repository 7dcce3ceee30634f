{#- One set of models for every account (docs/transform.md "Across accounts"; the layout choice:
    docs/decisions.md "One warehouse for every account").

    Each account lands in a raw schema of its own (guestdata_<name>), so one account's
    ACTIVATE_VERSION, hard deletes, deletions following and erasure act on its tables only. The
    staging layer reads every raw schema whose name matches one LIKE pattern, as Fivetran's
    packages union connectors' schemas: each row carries the schema it came from
    (source_relation), the account's name and (from the schema's account table) its account_id.

    The pattern: the var guestdata_raw_schemas, else the environment's GUESTDATA_RAW_SCHEMAS, else
    the one raw schema of the source (a plain `meltano run`: one account). A build of many
    accounts sets GUESTDATA_RAW_SCHEMAS='guestdata\_%', so adding an account edits no dbt file
    (the accounts DAG's one build is to set it: docs/transform.md). A schema counts as
    an account's once it holds the tap's account table (the models' own schemas never do). -#}

{% macro raw_schema_pattern() -%}
  {{ return(var('guestdata_raw_schemas', env_var('GUESTDATA_RAW_SCHEMAS', '')) or erasure_raw_location().schema) }}
{%- endmacro %}

{#- The account's name: the raw schema's name after guestdata_ (the accounts configuration's
    default schema, tap_guestdata/airflow/accounts.py); none for any other schema. -#}
{% macro account_name_of(schema) -%}
  {%- set prefix = var('guestdata_account_schema_prefix', 'guestdata_') -%}
  {%- set name = (schema | lower)[prefix | length:] -%}
  {{ return(name if (schema | lower).startswith(prefix) and name else none) }}
{%- endmacro %}

{#- The accounts' raw copies of one table: a list of {'schema', 'columns', 'types', 'signature'
    (the columns and types as one text: equal for copies of the same shape)} in schema order,
    from a bounded number of catalog queries (the tables of 10,000 schemas are one or a few
    round trips, not 10,000). Types are `;`-separated: a type's own text may hold a comma
    (numeric(10,2)). -#}
{% macro raw_relations(table) %}
  {% if not execute %}
    {{ return([]) }}
  {% endif %}
  {% set relations, shapes = [], {} %}
  {% for query in raw_columns_queries(table, raw_schema_pattern()) %}
    {% for row in run_query(query).rows %}
      {#- split once per shape: 10,000 schemas hold a few -#}
      {% set signature = row[1] ~ ' ' ~ row[2] %}
      {% if signature not in shapes %}
        {% do shapes.update({signature: {'columns': row[1].split(','), 'types': row[2].split(';')}}) %}
      {% endif %}
      {% do relations.append({'schema': row[0], 'columns': shapes[signature].columns,
                              'types': shapes[signature].types, 'signature': signature}) %}
    {% endfor %}
  {% endfor %}
  {{ return(relations) }}
{% endmacro %}

{#- Queries of (schema, its columns comma-separated in table order, their types `;`-separated in
    the same order) for each account schema holding the table, in schema order across them. An
    account schema: the pattern matches and it holds the tap's account table. -#}
{% macro raw_columns_queries(table, pattern) %}
  {{ return(adapter.dispatch('raw_columns_queries', 'guestdata')(table, pattern)) }}
{% endmacro %}

{% macro postgres__raw_columns_queries(table, pattern) %}
  {{ return([postgres__raw_columns_sql(table, pattern)]) }}
{% endmacro %}

{#- pg_catalog, not information_schema: the latter's privilege checks take seconds on 10,000
    schemas' columns. OFFSET 0 keeps the account table's look-up a subquery run per schema by
    the catalog's index: pulled up into a join, it read every schema's account entry for each
    table (the catalog's row estimates are of one schema: 1.5 s at 1,000 accounts, against
    0.02 s). -#}
{% macro postgres__raw_columns_sql(table, pattern) %}
  {{ return(
    "select schemas.nspname, string_agg(columns.attname, ',' order by columns.attnum),"
    ~ " string_agg(format_type(columns.atttypid, columns.atttypmod), ';' order by columns.attnum)"
    ~ " from pg_catalog.pg_namespace as schemas"
    ~ " join pg_catalog.pg_class as tables on tables.relnamespace = schemas.oid"
    ~ " join pg_catalog.pg_attribute as columns on columns.attrelid = tables.oid"
    ~ " where schemas.nspname like '" ~ pattern ~ "' and tables.relname = '" ~ table ~ "'"
    ~ " and tables.relkind in ('r', 'p', 'v') and columns.attnum > 0 and not columns.attisdropped"
    ~ " and exists (select 1 from pg_catalog.pg_class as account"
    ~ " where account.relnamespace = schemas.oid and account.relname = 'account' offset 0)"
    ~ " group by schemas.nspname order by schemas.nspname"
  ) }}
{% endmacro %}

{#- Snowflake: the account schemas first, in one query of information_schema.tables naming the
    ACCOUNT table, then the table's columns of just those schemas, a bounded list of names per
    query. Why not the accounts passed as a var: a schema then counts the moment its load creates
    it, as on PostgreSQL, and no list of 10,000 names travels in every dbt command. Why two steps:
    Snowflake builds information_schema.columns for every schema a predicate does not pin down,
    and a function of the column (upper(table_schema) like) pins down none (dbt-core#1877: "too
    much data" over many schemas). Names are compared as Snowflake folds unquoted identifiers
    (upper case), which is how the models name these relations. -#}
{% macro default__raw_columns_queries(table, pattern) %}
  {% set schemas = run_query(
      "select table_schema from information_schema.tables"
      ~ " where table_name = 'ACCOUNT' and table_schema like '" ~ pattern | upper ~ "'"
      ~ " order by table_schema").columns[0].values() | list %}
  {% set queries = [] %}
  {% for names in schemas | batch(raw_columns_schemas_per_query()) %}
    {% do queries.append(
      "select table_schema, listagg(column_name, ',') within group (order by ordinal_position),"
      ~ " listagg(data_type, ';') within group (order by ordinal_position)"
      ~ " from information_schema.columns"
      ~ " where table_name = '" ~ table | upper ~ "'"
      ~ " and table_schema in ('" ~ names | join("', '") ~ "')"
      ~ " group by table_schema order by table_schema") %}
  {% endfor %}
  {{ return(queries) }}
{% endmacro %}

{#- Account schemas named in one query of information_schema.columns: 1,000 names of about 25
    characters keep the query near 30 KB, far under Snowflake's statement limit, and its result
    (one row per schema) small. -#}
{% macro raw_columns_schemas_per_query() %}
  {{ return(1000) }}
{% endmacro %}

{#- Every account's rows of a raw table, one select per account schema, each with
    source_relation and account_name first; a column an older schema lacks reads null, cast to
    the type it has where it exists (a bare null in a union is text, so two schemas without a
    bigint column would fail the union against the one with it, as dbt_utils.union_relations
    casts for). No schema holds the table yet: the source itself, so the error names what is
    missing.

    Bounded at any number of accounts (issue 43): the selects go into the statement whole while
    they fit in statement_batch_bytes(); past that, each batch becomes a view beside the model
    (account_union_views), and the statement unions the views. A select is rendered per shape of
    table, not per account: copies loaded by the same tap share their columns, and an account's
    select is then its schema's name around the shape's column list (`raw_table.*` where the
    table's columns are the union's, in order). -#}
{% macro union_raw(table) -%}
  {%- set relations = raw_relations(table) -%}
  {%- if not relations -%}
select
    cast('{{ source('guestdata', table).schema | lower }}' as {{ dbt.type_string() }}) as source_relation,
    cast(null as {{ dbt.type_string() }}) as account_name,
    raw_table.*
from {{ source('guestdata', table) }} as raw_table
  {%- else -%}
  {%- set shapes = {} -%}
  {%- for relation in relations if relation.signature not in shapes -%}
    {%- do shapes.update({relation.signature: relation}) -%}
  {%- endfor -%}
  {%- set columns = [] -%}
  {%- set types = {} -%}
  {%- for relation in shapes.values() -%}
    {%- for column in relation.columns if column | lower not in types -%}
      {%- do columns.append(column | lower) -%}
      {%- do types.update({column | lower: relation.types[relation.columns.index(column)]}) -%}
    {%- endfor -%}
  {%- endfor -%}
  {%- set folded = columns | map('upper' if unquoted_names_upper() else 'lower') | list -%}
  {%- set select_lists = {} -%}
  {%- for signature, relation in shapes.items() -%}
    {%- set held = relation.columns | map('lower') | list -%}
    {%- set listed = [] -%}
    {%- for column in columns -%}
      {%- do listed.append((adapter.quote(relation.columns[held.index(column)]) if column in held
                            else 'cast(null as ' ~ types[column] ~ ')') ~ ' as ' ~ column) -%}
    {%- endfor -%}
    {%- do select_lists.update({signature: 'raw_table.*' if relation.columns == folded else listed | join(',\n    ')}) -%}
  {%- endfor -%}
-- depends_on: {{ source('guestdata', table) }}
  {#- a build reads only the accounts with new raw rows (macros/changed_accounts.sql); none of
      them: the first account's select, without a row -#}
  {%- set rebuilt = rebuilt_accounts() -%}
  {%- set read = [] -%}
  {%- for relation in relations if rebuilt is none or relation.schema | lower in rebuilt -%}
    {%- do read.append(relation) -%}
  {%- endfor -%}
  {%- set branches = [] -%}
  {%- for relation in read or relations[:1] -%}
    {%- set name = account_name_of(relation.schema) -%}
    {%- do branches.append(account_branch(
        "select\n    cast('" ~ relation.schema | lower ~ "' as " ~ dbt.type_string() ~ ") as source_relation,"
        ~ "\n    cast(" ~ ("'" ~ name ~ "'" if name else 'null') ~ " as " ~ dbt.type_string() ~ ") as account_name,"
        ~ "\n    " ~ select_lists[relation.signature]
        ~ "\nfrom " ~ api.Relation.create(database=target.database, schema=relation.schema, identifier=table)
        ~ " as raw_table" ~ ("" if read else " where 1 = 0"))) -%}
  {%- endfor %}
{{ bounded_union_all(branches, table) }}
  {%- endif -%}
{%- endmacro %}

{#- `branches` (a select per account) under union all: in the statement whole while they fit in
    `budget` (statement_batch_bytes(), or a share of it for a statement holding several such
    unions); past that, each batch a view beside the model being built (named after `name`:
    account_union_views), and the views' union. Outside a model (a hook, an operation): whole. -#}
{% macro bounded_union_all(branches, name, budget=none) %}
  {% set sized = [] %}
  {% for branch in branches %}
    {% do sized.append({'sql': branch, 'size': branch | length + 16}) %}
  {% endfor %}
  {% set batches = batches_within(sized, budget or statement_batch_bytes()) %}
  {% if batches | length <= 1 or this is not defined or this is none %}
    {{ return(union_all(branches)) }}
  {% endif %}
  {{ return(union_all(account_union_views(name, batches))) }}
{% endmacro %}

{#- A union's batches of account selects (bounded_union_all) as views beside the model being
    built, `<model>__union_<name>_<n>` (cut to PostgreSQL's 63 characters): a select of each,
    for the model's statement to union. Each view's statement holds one batch. They last only
    while the model builds: its post-hook drops them (account_union_views_dropped; on
    PostgreSQL inside the model's transaction, so no other session sees them, and a loader's
    later change to a raw table is never blocked by a view reading it). -#}
{% macro account_union_views(name, batches) %}
  {% set selects = [] %}
  {% for batch in batches %}
    {#- 57 characters and `_<n>`: PostgreSQL's names end at 63. -#}
    {% set view = api.Relation.create(database=this.database, schema=this.schema,
                                      identifier=(this.identifier ~ '__union_' ~ name)[:57] ~ '_' ~ loop.index,
                                      type='view') %}
    {% do run_query(account_union_view_sql(view, union_all(batch | map(attribute='sql') | list))) %}
    {% do selects.append('select * from ' ~ view) %}
  {% endfor %}
  {{ return(selects) }}
{% endmacro %}

{% macro account_union_view_sql(view, select_sql) %}
  {{ return(adapter.dispatch('account_union_view_sql', 'guestdata')(view, select_sql)) }}
{% endmacro %}

{#- PostgreSQL: a view's columns cannot change under `or replace`, and an account's new column
    changes them. -#}
{% macro postgres__account_union_view_sql(view, select_sql) %}
  {{ return('drop view if exists ' ~ view ~ ';\ncreate view ' ~ view ~ ' as\n' ~ select_sql) }}
{% endmacro %}

{% macro default__account_union_view_sql(view, select_sql) %}
  {{ return('create or replace view ' ~ view ~ ' as\n' ~ select_sql) }}
{% endmacro %}

{#- Every model's post-hook: the union views its build made (account_union_views), dropped. One
    catalog query of the model's schema; no statement more where there are none. -#}
{% macro account_union_views_dropped() %}
  {% if not execute %}
    {{ return('') }}
  {% endif %}
  {#- the names account_union_views gives, cut as they are cut -#}
  {% set prefix = (this.identifier ~ '__union_')[:57] %}
  {% set found = run_query(account_union_views_sql(this.schema, prefix)) %}
  {% set drops = [] %}
  {% for row in found.rows if (row[0] | lower).startswith(prefix | lower) %}
    {% do drops.append('drop view if exists '
        ~ api.Relation.create(database=this.database, schema=this.schema, identifier=row[0], type='view')) %}
  {% endfor %}
  {{ return(drops | join(';\n')) }}
{% endmacro %}

{#- The names of the views in `schema` whose names start with `prefix` (LIKE's own wildcards in
    it escaped; the caller compares the names exactly). -#}
{% macro account_union_views_sql(schema, prefix) %}
  {{ return(adapter.dispatch('account_union_views_sql', 'guestdata')(schema, prefix)) }}
{% endmacro %}

{% macro postgres__account_union_views_sql(schema, prefix) %}
  {{ return("select viewname from pg_catalog.pg_views where schemaname = '" ~ schema
            ~ "' and viewname like '" ~ prefix | replace('_', '\\_') ~ "%'") }}
{% endmacro %}

{% macro default__account_union_views_sql(schema, prefix) %}
  {{ return("select table_name from information_schema.views where table_schema = '" ~ schema | upper
            ~ "' and table_name like '" ~ prefix | upper ~ "%'") }}
{% endmacro %}

{#- Whether the warehouse folds an unquoted name to upper case (Snowflake) or lower (PostgreSQL):
    how union_raw's `as <column>` names read. -#}
{% macro unquoted_names_upper() %}
  {{ return(adapter.dispatch('unquoted_names_upper', 'guestdata')()) }}
{% endmacro %}

{% macro postgres__unquoted_names_upper() %}
  {{ return(false) }}
{% endmacro %}

{% macro default__unquoted_names_upper() %}
  {{ return(true) }}
{% endmacro %}

{#- A statement that names many accounts holds at most this many bytes of their SQL (union_raw,
    the source-deletions and erasure hooks cut their accounts into batches so; the var
    guestdata_statement_batch_bytes, or GUESTDATA_STATEMENT_BATCH_BYTES, sets another: the tests
    cut two accounts apart so): half of the 512 KB
    every statement of a build stays under (issue 43; Snowflake truncates a larger one in its query
    history), so the SQL around a batch (a few KB) never takes it over. -#}
{% macro statement_batch_bytes() %}
  {{ return(var('guestdata_statement_batch_bytes', env_var('GUESTDATA_STATEMENT_BATCH_BYTES', '262144')) | int) }}
{% endmacro %}

{#- `parts` (each a dict with its SQL's `size`) in order, cut into lists whose sizes add up to at
    most `budget` each (a part larger than the budget goes alone). -#}
{% macro batches_within(parts, budget) %}
  {% set batches, filled = [], {'size': 0} %}
  {% for part in parts %}
    {% if not batches or filled.size + part.size > budget %}
      {% do batches.append([]) %}
      {% do filled.update({'size': 0}) %}
    {% endif %}
    {% do batches[-1].append(part) %}
    {% do filled.update({'size': filled.size + part.size}) %}
  {% endfor %}
  {{ return(batches) }}
{% endmacro %}

{#- One PostgreSQL statement running every update or delete of `changes` (SQL, one table each)
    as a data-modifying CTE, after `ctes` (a `with` list they read, or ''): how many rows they
    changed in all is its one row. An update changes one table, and each account's raw rows are
    tables of their own: this changes many accounts' in one round trip. -#}
{% macro postgres_changes_sql(changes, ctes='') %}
  {% set named, counted = [], [] %}
  {% for sql in changes %}
    {% do named.append("changed_" ~ loop.index ~ " as (" ~ sql ~ " returning 1)") %}
    {% do counted.append("select 1 from changed_" ~ loop.index) %}
  {% endfor %}
  {{ return((ctes ~ ",\n" if ctes else "with ") ~ named | join(",\n")
            ~ "\nselect count(*) from (" ~ union_all(counted) ~ ") as changed") }}
{% endmacro %}

{#- `branches` under union all, nested as a balanced tree of parentheses: PostgreSQL analyses a
    chain of unions one recursion level per branch, and 10,000 branches exceed its stack
    (max_stack_depth, 2 MB by default); the tree is 14 levels deep. -#}
{% macro union_all(branches) %}
  {% if branches | length == 1 %}
    {{ return(branches[0]) }}
  {% endif %}
  {% set middle = (branches | length) // 2 %}
  {{ return("(" ~ union_all(branches[:middle]) ~ ")\nunion all\n(" ~ union_all(branches[middle:]) ~ ")") }}
{% endmacro %}

{#- One account's select in a union across accounts. PostgreSQL pulls each plain select of a
    union up into it and, at each, rewrites every other branch's columns: its planning grows as
    the square of the accounts (a union of one 46-column table: 0.35 s at 250 accounts, 9.3 s at
    1,000). OFFSET 0 keeps each branch a subquery planned on its own (0.07 s, 0.22 s); a filter
    on the union is then applied to its rows rather than inside each branch's scan. -#}
{% macro account_branch(select_sql) %}
  {{ return(adapter.dispatch('account_branch', 'guestdata')(select_sql)) }}
{% endmacro %}

{% macro postgres__account_branch(select_sql) %}
  {{ return('(' ~ select_sql ~ ' offset 0)') }}
{% endmacro %}

{% macro default__account_branch(select_sql) %}
  {{ return(select_sql) }}
{% endmacro %}
