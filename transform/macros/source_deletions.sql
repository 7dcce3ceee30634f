{#- Deletions followed inside any window (tap_guestdata/stream/deletions.py; docs/security.md "A guest
    deleted at the vendor"). Deleting a guest in the service drops them from the API (spec 1);
    Singer has no ACTIVATE_VERSION scoped to a window, so the tap records each complete read of
    guests in read_windows: per venue, the window [covers_from, covers_until), the run's version
    (read_version, epoch ms of its start) and how many distinct rows it returned (rows_read).

    A raw row is deleted in the source when a trusted read covered its venue and instant, and the
    row's newest version is older than that read (the read did not return it). A read is trusted
    once the warehouse holds at least rows_read rows of it (version >= read_version): a load
    that lost part of a read flags nothing. A row outside every recorded window is never flagged. -#}

{#- The streams whose deletions are followed (their source's YAML `meta: follow_deletions`): the
    raw table's time column, and what its personal fields become (the stream catalog). Empty
    while dbt parses: the graph is read at execution. -#}
{% macro source_deletion_streams() %}
  {% set streams = [] %}
  {% for source in (graph.sources.values() if execute else []) if source.package_name == 'guestdata' %}
    {% set meta = source_meta(source) %}
    {% if meta.follow_deletions %}
      {% do streams.append({'name': source.name, 'time': meta.follow_deletions.time,
                            'set': erased_personal_fields(source.name)}) %}
    {% endif %}
  {% endfor %}
  {{ return(streams) }}
{% endmacro %}

{#- {raw schema: {'windows': its read_windows, 'raw': its table of the stream, 'raw_columns':
    that table's columns}} for every account schema holding both (none yet: the tap before 0.2,
    or read_windows not selected), from the catalog queries of raw_relations, not a look-up per
    account. adapter.get_relation queries the catalog at every call for a schema outside dbt's
    cache: two lookups per account took 39 s of compiling one model at 1,000 accounts. -#}
{% macro read_tables(stream) %}
  {% set raw_columns = {} %}
  {% for relation in raw_relations(stream.name) %}
    {% do raw_columns.update({relation.schema: relation.columns}) %}
  {% endfor %}
  {% set tables = {} %}
  {% for relation in raw_relations('read_windows') if relation.schema in raw_columns %}
    {% do tables.update({relation.schema: {
        'windows': api.Relation.create(database=target.database, schema=relation.schema, identifier='read_windows'),
        'raw': api.Relation.create(database=target.database, schema=relation.schema, identifier=stream.name),
        'raw_columns': raw_columns[relation.schema]
    }}) %}
  {% endfor %}
  {{ return(tables) }}
{% endmacro %}

{#- Every complete read of a stream in `tables` (SQL of every account's reads and raw rows, each
    with its source_relation: accounts_read_tables, or the hook's source_deletions_sql) that
    `reads_where` (SQL over `reads`) selects, with how many of its rows the warehouse holds
    (rows_held: rows of its venue and window, version >= read_version). A read is trusted once
    rows_held >= rows_read: the one rule, for the reads model and the hook alike. -#}
{% macro read_holdings_sql(stream, tables, reads_where='1 = 1') %}
  {{ return(
    "select reads.source_relation, reads.venue_id, reads.read_version, reads.read_started_at,"
    ~ " reads.covers_from, reads.covers_until, reads.completed_at, reads.rows_read,"
    ~ " count(distinct held.id) as rows_held, max(reads._sdc_batched_at) as loaded_at"
    ~ " from " ~ tables.windows ~ " as reads"
    ~ " left join " ~ tables.raw ~ " as held"
    ~ " on held.source_relation = reads.source_relation"
    ~ " and held.venue_id = reads.venue_id"
    ~ " and held." ~ stream.time ~ " >= reads.covers_from"
    ~ " and held." ~ stream.time ~ " < reads.covers_until"
    ~ " and held._sdc_table_version >= reads.read_version"
    ~ " where reads.stream = '" ~ stream.name ~ "' and (" ~ reads_where ~ ")"
    ~ " group by reads.source_relation, reads.venue_id, reads.read_version, reads.read_started_at,"
    ~ " reads.covers_from, reads.covers_until, reads.completed_at, reads.rows_read"
  ) }}
{% endmacro %}

{#- One account's read_windows and raw table of a stream (`relations`: read_tables') as two plain
    selects (account_branch), each row with its source_relation. `reads_where`, `held_where`
    (SQL, or none): only those rows; `flags`: more columns of the reads, first (SQL ending in a
    comma). -#}
{% macro account_read_branches(stream, schema, relations, reads_where=none, held_where=none, flags='') %}
  {% set account = "cast('" ~ schema | lower ~ "' as " ~ dbt.type_string() ~ ") as source_relation, " %}
  {{ return({
      'reads': account_branch("select " ~ account ~ flags ~ "stream, venue_id, read_version,"
          ~ " read_started_at, covers_from, covers_until, completed_at, rows_read, _sdc_batched_at"
          ~ " from " ~ relations.windows ~ " as reads"
          ~ (" where " ~ reads_where if reads_where else "")),
      'held': account_branch("select " ~ account ~ "id, venue_id, " ~ stream.time
          ~ ", _sdc_table_version from " ~ relations.raw
          ~ (" where " ~ held_where if held_where else ""))
  }) }}
{% endmacro %}

{#- Every account's read_windows and raw table of a stream (`tables`: read_tables) as two
    unions of plain selects (account_read_branches): joined and grouped once on top. PostgreSQL
    plans a union whose every branch joins and groups in time growing faster than the branches
    (40 s at 1,000 accounts); plain selects, in proportion. Bounded as union_raw's
    (bounded_union_all), each to half a batch: one statement holds both (two whole batches were
    413 KB at 1,000 accounts on Snowflake, and would pass 512 KB just short of a view each). -#}
{% macro accounts_read_tables(stream, tables) %}
  {% set windows, raw = [], [] %}
  {% for schema, relations in tables.items() %}
    {% set branches = account_read_branches(stream, schema, relations) %}
    {% do windows.append(branches.reads) %}
    {% do raw.append(branches.held) %}
  {% endfor %}
  {% set half = statement_batch_bytes() // 2 %}
  {{ return({'windows': "(" ~ bounded_union_all(windows, 'read_windows', half) ~ ")",
              'raw': "(" ~ bounded_union_all(raw, stream.name ~ '_held', half) ~ ")"}) }}
{% endmacro %}

{#- The reads of a stream the hook applies, of an account whose watermark is `since` (SQL over
    `reads`): those loaded since then (every read without one). -#}
{% macro hook_reads_where(stream, since) -%}
  reads.stream = '{{ stream.name }}' and {{ loaded_since(since, 'reads._sdc_batched_at') }}
{%- endmacro %}

{#- A read of read_windows (`reads`) of the account `account` (an SQL expression) that
    stg_guestdata__guest_reads (`applied`) holds as trusted from this very raw row, built a
    lookback after it was loaded: the hook that ran before that build saw it trusted and applied
    it (the read at the watermark, `>=`, is the last batch the previous build read; without this
    its whole window was read again). -#}
{% macro applied_read(applied, account) -%}
  exists (select 1 from {{ applied }} as applied where applied.source_relation = {{ account }} and applied.is_trusted and applied.venue_id = reads.venue_id and applied.read_version = reads.read_version and applied.loaded_at = reads._sdc_batched_at and applied.built_at >= {{ dbt.dateadd('hour', incremental_lookback_hours(), 'reads._sdc_batched_at') }})
{%- endmacro %}

{#- The accounts (source_relation: their raw schemas in lower case) among `tables` (read_tables)
    holding a read of the stream the hook applies (hook_reads_where, not one `applied` holds as
    applied_read says): only their trusted reads are checked (an account with none would be
    read for nothing; at 1,000 accounts that took 10.6 s of a nightly run where nothing was
    new). Each account's branch
    applies its own watermark; the reads model is joined once per query, to the union: inside
    each branch it was read once per account (10,000 accounts: over 6 minutes at 100% CPU). One
    query per batch of accounts (statement_batch_bytes). -#}
{% macro schemas_with_reads_since(stream, tables, watermarks, applied) %}
  {% set branches = [] %}
  {% for schema, relations in tables.items() if watermarks.get(schema | lower) is not none %}
    {% set branch = account_read_branches(stream, schema, relations,
        reads_where=hook_reads_where(stream, watermarks.get(schema | lower))).reads %}
    {% do branches.append({'sql': branch, 'size': branch | length}) %}
  {% endfor %}
  {% set not_applied = '' if applied is none else ' where not ' ~ applied_read(applied, 'reads.source_relation') %}
  {% set found = [] %}
  {% for batch in batches_within(branches, statement_batch_bytes()) %}
    {% set union = union_all(batch | map(attribute='sql') | list) %}
    {% do found.extend(run_query("select distinct source_relation from (" ~ union ~ ") as reads"
                                 ~ not_applied).columns[0].values()) %}
  {% endfor %}
  {{ return(found) }}
{% endmacro %}

{#- One account's share of a statement: {'schema', 'tables', 'reads', 'held', 'flag', 'size'}.
    `reads`: its reads of the stream loaded since its watermark `since` (every read without
    one), with `checks_applied`: whether reads applied_read finds are skipped (only past a
    watermark, as before: a first or full read applies every read). `held`: its raw rows, from
    the earliest window of those reads on (past a watermark; a row before it is in no window
    read, so it cannot be flagged; applied_read is left out of this floor, as it would read the
    reads model once per account, so it is at or before the applied reads' own). `flag`: the
    update of its raw table (PostgreSQL's data-modifying CTE). `size`: the bytes it adds to its
    batch's statement (128 for the CTE's name, its count and the unions' parentheses: about 100
    each). -#}
{% macro source_deletions_part(stream, schema, tables, since) %}
  {% set selected = hook_reads_where(stream, since) %}
  {% set floor = none if since is none else (stream.time ~ " >= (select min(reads.covers_from)"
      ~ " from " ~ tables.windows ~ " as reads where " ~ selected ~ ")") %}
  {% set branches = account_read_branches(stream, schema, tables, reads_where=selected,
      held_where=floor, flags=("true" if since is not none else "false") ~ " as checks_applied, ") %}
  {% set flag = flag_deleted_sql(stream, tables,
      "id in (select deleted_id from deleted where source_relation = '" ~ schema | lower ~ "')") %}
  {{ return({'schema': schema, 'tables': tables, 'reads': branches.reads, 'held': branches.held,
             'flag': flag,
             'size': (branches.reads | length) + (branches.held | length) + (flag | length) + 128}) }}
{% endmacro %}

{#- The raw rows the API no longer returns, of a batch of accounts (`parts`,
    source_deletions_part), as CTEs ending in `deleted` (source_relation, deleted_id): one
    statement for the batch, not one per account. A row is deleted in the source when a trusted
    read (read_holdings_sql) covered its venue and instant and its newest version is older than
    the read. The reads and the raw rows are unions of plain selects joined and grouped once on
    top (as the reads model does: PostgreSQL plans a union whose every branch joins and groups in
    time growing faster than the branches). -#}
{% macro source_deletions_sql(stream, parts, applied) -%}
with reads as (
    select * from ({{ union_all(parts | map(attribute='reads') | list) }}) as reads
    {%- if applied is not none %}
    where not (reads.checks_applied and {{ applied_read(applied, 'reads.source_relation') }})
    {%- endif %}
),
held as (
    {{ union_all(parts | map(attribute='held') | list) }}
),
trusted as (
    select * from ({{ read_holdings_sql(stream, {'windows': 'reads', 'raw': 'held'}) }}) as holdings
    where rows_held >= rows_read
),
ids as (
    select source_relation, id, venue_id, min({{ stream.time }}) as row_time,
        max(coalesce(_sdc_table_version, 0)) as newest_version
    from held
    group by source_relation, id, venue_id
),
deleted as (
    select distinct ids.source_relation, ids.id as deleted_id
    from ids
    inner join trusted
        on trusted.source_relation = ids.source_relation
        and trusted.venue_id = ids.venue_id
        and ids.row_time >= trusted.covers_from
        and ids.row_time < trusted.covers_until
        and ids.newest_version < trusted.read_version
)
{%- endmacro %}

{#- The update that flags an account's rows `where` says (SQL over its raw table): marked
    (_sdc_deleted_at) and without their personal fields, as an erasure leaves them; only rows
    not yet in that form change, so what is counted is new. The raw table's columns come from
    read_tables (the catalog query it made): a look-up per account took one more round trip
    each. -#}
{% macro flag_deleted_sql(stream, tables, where) %}
  {% set assignments = {} %}
  {% do assignments.update(stream.set) %}
  {% do assignments.update({'_sdc_deleted_at': 'now'}) %}
  {{ return(erasure_update_sql(tables.raw, assignments, where, columns=tables.raw_columns)) }}
{% endmacro %}

{#- Flags the batch's deleted rows; returns how many rows changed. PostgreSQL: one statement for
    the batch, the deletions found once and each account's raw table updated by a data-modifying
    CTE of its own (an update changes one table, and each account's rows are its own table). -#}
{% macro flag_source_deletions(stream, parts, applied) %}
  {{ return(adapter.dispatch('flag_source_deletions', 'guestdata')(stream, parts, applied)) }}
{% endmacro %}

{% macro postgres__flag_source_deletions(stream, parts, applied) %}
  {% set sql = postgres_changes_sql(parts | map(attribute='flag') | list,
                                    source_deletions_sql(stream, parts, applied)) %}
  {% set _, found = adapter.execute(sql, auto_begin=true, fetch=true) %}
  {{ return(found.rows[0][0]) }}
{% endmacro %}

{#- Snowflake has no data-modifying CTE and an UPDATE or MERGE changes one table: the batch's
    deletions are found in one query, then only the accounts holding some are updated, by their
    ids (source_deletions_ids_per_update at a time). A night whose reads flag nothing sends no
    update at all. -#}
{% macro default__flag_source_deletions(stream, parts, applied) %}
  {% set _, found = adapter.execute(source_deletions_sql(stream, parts, applied)
      ~ "\nselect source_relation, deleted_id from deleted order by source_relation, deleted_id",
      auto_begin=true, fetch=true) %}
  {% set ids = {} %}
  {% for account, deleted_id in found.rows %}
    {% do ids.setdefault(account, []).append(deleted_id | int) %}
  {% endfor %}
  {% set changed = [] %}
  {% for part in parts if part.schema | lower in ids %}
    {% for chunk in ids[part.schema | lower] | batch(source_deletions_ids_per_update()) %}
      {% set where = "id in (" ~ chunk | join(', ') ~ ")" %}
      {% set response, _ = adapter.execute(flag_deleted_sql(stream, part.tables, where), auto_begin=true) %}
      {% do changed.append(response.rows_affected) %}
    {% endfor %}
  {% endfor %}
  {{ return(changed | sum) }}
{% endmacro %}

{#- Ids named in one update: 10,000 ids of up to 20 digits keep it near 220 KB. -#}
{% macro source_deletions_ids_per_update() %}
  {{ return(10000) }}
{% endmacro %}

{#- on-run-start: rows the API no longer returns inside a trusted read's window are marked
    (_sdc_deleted_at, so staging leaves them out) and lose their personal fields, as an erasure
    does; rows already in that form are not counted again. Each account's reads flag only its
    own raw rows (a read of one account says nothing of another's). The accounts with new reads
    (and those the models do not hold yet) are checked together, a batch of accounts per
    statement (statement_batch_bytes), not a statement per account: at 10,000 accounts
    one update each took about 520 s of an 872 s nightly run. -#}
{% macro apply_source_deletions(on_run_start=false) %}
  {% if not execute or (on_run_start and flags.WHICH not in ['build', 'run', 'test', 'retry']) %}
    {{ return('') }}
  {% endif %}
  {% set counts, watermarks = {}, hook_watermarks() %}
  {% set applied = none if flags.FULL_REFRESH else erasure_model_relation('stg_guestdata__guest_reads') %}
  {% if applied is not none and not has_built_at(applied) %}
    {% set applied = none %}  {#- no record of when it was built -#}
  {% endif %}
  {% for stream in source_deletion_streams() %}
    {% set accounts = read_tables(stream) %}
    {% set loaded = schemas_with_reads_since(stream, accounts, watermarks, applied) %}
    {% set parts = [] %}
    {% for schema, tables in accounts.items() if schema | lower in loaded or watermarks.get(schema | lower) is none %}
      {% do parts.append(source_deletions_part(stream, schema, tables, watermarks.get(schema | lower))) %}
    {% endfor %}
    {% for batch in batches_within(parts, statement_batch_bytes()) %}
      {% do counts.update({stream.name: counts.get(stream.name, 0)
                                        + flag_source_deletions(stream, batch, applied)}) %}
    {% endfor %}
  {% endfor %}
  {% if counts %}
    {% do adapter.commit() %}
    {{ log('source deletions: rows the API no longer returns, newly flagged: '
           ~ erasure_counts_text(counts), info=True) }}
  {% endif %}
  {{ return('') }}
{% endmacro %}

{#- A read of read_windows (`reads`, with its source_relation) the model `existing` does not hold
    as trusted from this very raw row (its loader time): one it holds so stays as it is (a
    trusted read stays trusted), so the read at a build's watermark (`>=`: the last batch the
    previous build read) and within its lookback is not counted again, nor its window of raw
    guests. A hashed subplan, as the others beside it. -#}
{% macro not_held_trusted(reads, existing) -%}
  ({{ reads }}.source_relation, {{ reads }}.venue_id, {{ reads }}.read_version, {{ reads }}._sdc_batched_at) not in (select source_relation, venue_id, read_version, loaded_at from {{ existing }} where is_trusted and source_relation is not null and loaded_at is not null)
{%- endmacro %}

{#- For stg_guestdata__guest_reads: every account's complete reads of guests, per venue, whether
    trusted, with the London days each covered whole (from covers_from's day up to the day
    before covers_until's) and when it started and finished: a day's guest page was read
    somewhere in between. `existing` (the model's incremental build): only the reads loaded
    since its last build, those it holds untrusted (their rows may arrive later), and every read
    of an account it does not hold yet. -#}
{% macro guest_reads_sql(existing=none) -%}
  {%- set stream = (source_deletion_streams() | selectattr('name', 'equalto', 'guests') | list
                    or [none])[0] -%}
  {%- set tables = read_tables(stream) if stream is not none else {} -%}
  {#- only the accounts with new raw rows (macros/changed_accounts.sql) -#}
  {%- set rebuilt = rebuilt_accounts() if existing is not none else none -%}
  {%- for schema in tables.keys() | list if rebuilt is not none and schema | lower not in rebuilt -%}
    {%- do tables.pop(schema) -%}
  {%- endfor -%}
  {%- set reads_where = '1 = 1' -%}
  {%- if existing is not none -%}
    {#- hashed subplans: a subquery per read row, correlated on its account, would scan the
        model once per read. -#}
    {%- set reads_where = "(" ~ loaded_since(build_watermark(existing), 'reads._sdc_batched_at')
        ~ " and " ~ not_held_trusted('reads', existing) ~ ")"
        ~ " or (reads.source_relation, reads.venue_id, reads.read_version) in (select"
        ~ " source_relation, venue_id, read_version from " ~ existing ~ " where not is_trusted)"
        ~ " or reads.source_relation not in (select source_relation from " ~ existing
        ~ " where source_relation is not null)" -%}
  {%- endif -%}
  {%- if not tables -%}
select
    cast(null as {{ dbt.type_string() }}) as source_relation,
    cast(null as {{ dbt.type_bigint() }}) as venue_id,
    cast(null as {{ dbt.type_bigint() }}) as read_version,
    cast(null as date) as covered_from_day,
    cast(null as date) as covered_until_day,
    cast(null as {{ dbt.type_timestamp() }}) as read_started_at,
    cast(null as {{ dbt.type_timestamp() }}) as completed_at,
    cast(null as {{ dbt.type_boolean() }}) as is_trusted,
    cast(null as {{ dbt.type_timestamp() }}) as loaded_at
where 1 = 0
  {%- else %}
select
    cast(source_relation as {{ dbt.type_string() }}) as source_relation,
    cast(venue_id as {{ dbt.type_bigint() }}) as venue_id,
    cast(read_version as {{ dbt.type_bigint() }}) as read_version,
    {{ london_date('covers_from') }} as covered_from_day,
    {{ london_date('covers_until') }} as covered_until_day,
    read_started_at,
    completed_at,
    rows_held >= rows_read as is_trusted,
    loaded_at
from ({{ read_holdings_sql(stream, accounts_read_tables(stream, tables), reads_where) }}) as holdings
  {%- endif -%}
{%- endmacro %}
