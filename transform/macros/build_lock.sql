{#- One build at a time per models schema (docs/transform.md, "One build at a time"). Two builds
    into one schema (the daily DAG's and the weekly refresh's, or one started by hand) would each
    delete and insert the same keys, and both could insert one. dbt closes its hooks' connection
    once on-run-start has run, so no session lock (an advisory lock) outlives it. The lock is a
    row of <models schema>.guestdata_build_lock instead, which on-run-start claims for this
    invocation and on-run-end releases. A build that finds it held logs so and waits
    (guestdata_build_lock_wait_minutes), then runs, or fails naming the holder. A claim older
    than guestdata_build_lock_minutes (longer than any build) is a build that died (killed
    mid-way, so its on-run-end never ran) and is taken over. The vars: dbt_project.yml. -#}

{% macro build_lock_relation() %}
  {{ return(api.Relation.create(
      database=target.database, schema=target.schema, identifier='guestdata_build_lock')) }}
{% endmacro %}

{%- macro build_lock_takes() -%}
  {{ return(execute and flags.WHICH in ['build', 'run', 'test', 'retry', 'seed', 'snapshot']) }}
{%- endmacro -%}

{% macro acquire_build_lock() %}
  {% if not build_lock_takes() %}
    {{ return('') }}
  {% endif %}
  {% set lock = build_lock_relation() %}
  {% set wait_minutes = var('guestdata_build_lock_wait_minutes') | int %}
  {% set poll_seconds = var('guestdata_build_lock_poll_seconds') | int %}
  {% for statement in build_lock_setup(lock) %}
    {% do adapter.execute(statement, auto_begin=true) %}
  {% endfor %}
  {% do adapter.commit() %}
  {% set state = {'holder': none, 'waited': 0} %}
  {% for attempt in range((wait_minutes * 60) // poll_seconds + 1) %}
    {% if state.holder != invocation_id %}
      {% if attempt > 0 %}
        {% do adapter.execute(build_lock_sleep_sql(poll_seconds), auto_begin=true) %}
        {% do state.update({'waited': state.waited + poll_seconds}) %}
      {% endif %}
      {% do adapter.execute(build_lock_claim_sql(lock), auto_begin=true) %}
      {% set _, held = adapter.execute(
          'select holder, held_since from ' ~ lock ~ " where lock_name = '" ~ target.schema ~ "'",
          auto_begin=true, fetch=true) %}
      {% do adapter.commit() %}
      {% do state.update({'holder': held.columns[0].values()[0]}) %}
      {% if state.holder != invocation_id and attempt == 0 %}
        {{ log('build lock: another build holds ' ~ target.schema ~ ' (invocation ' ~ state.holder
               ~ ', since ' ~ held.columns[1].values()[0] ~ '); waiting for it, at most '
               ~ wait_minutes ~ ' minutes', info=True) }}
      {% endif %}
    {% endif %}
  {% endfor %}
  {% if state.holder != invocation_id %}
    {{ exceptions.raise_compiler_error(
        'build lock: another build (invocation ' ~ state.holder ~ ') still holds ' ~ target.schema
        ~ ' after ' ~ wait_minutes ~ ' minutes; this build did not start. If that build is dead, '
        ~ "release its lock: dbt run-operation release_build_lock --args '{holder: "
        ~ state.holder ~ "}'") }}
  {% endif %}
  {{ log('build lock: ' ~ target.schema ~ ' is this build\'s' ~ (
      ' (waited ' ~ state.waited ~ ' s)' if state.waited else ''), info=True) }}
  {{ return('') }}
{% endmacro %}

{#- This invocation's claim, when the lock is free, its own, or older than a build lasts. -#}
{% macro build_lock_claim_sql(lock) %}
  {% set minutes = var('guestdata_build_lock_minutes') | int %}
  {% set now = 'cast(' ~ dbt.current_timestamp() ~ ' as ' ~ dbt.type_timestamp() ~ ')' %}
  {{ return(
      'update ' ~ lock ~ " set holder = '" ~ invocation_id ~ "', held_since = " ~ now
      ~ " where lock_name = '" ~ target.schema ~ "' and (holder is null or holder = '"
      ~ invocation_id ~ "' or held_since < " ~ dbt.dateadd('minute', -minutes, now) ~ ')') }}
{% endmacro %}

{#- The table and the schema's one row, created once even by two builds at once. -#}
{% macro build_lock_setup(lock) %}
  {% set create = [
      'create schema if not exists ' ~ lock.without_identifier().include(database=false),
      'create table if not exists ' ~ lock ~ ' (lock_name varchar(128) primary key, holder '
      ~ 'varchar(64), held_since ' ~ dbt.type_timestamp() ~ ')'] %}
  {{ return(adapter.dispatch('build_lock_setup', 'guestdata')(lock, create)) }}
{% endmacro %}

{#- PostgreSQL: two "create ... if not exists" at once can both create (a duplicate key error
    of the catalog), so they take turns on a transaction's advisory lock. -#}
{% macro postgres__build_lock_setup(lock, create) %}
  {{ return(["select pg_advisory_xact_lock(hashtext('guestdata_build_lock'))"] + create
             + ['insert into ' ~ lock ~ " (lock_name) values ('" ~ target.schema
                ~ "') on conflict (lock_name) do nothing"]) }}
{% endmacro %}

{#- Snowflake runs two merges into one table one after the other. -#}
{% macro default__build_lock_setup(lock, create) %}
  {{ return(create + ['merge into ' ~ lock ~ " as lock using (select '" ~ target.schema
            ~ "' as lock_name) as wanted on lock.lock_name = wanted.lock_name"
            ~ ' when not matched then insert (lock_name) values (wanted.lock_name)']) }}
{% endmacro %}

{% macro build_lock_sleep_sql(seconds) %}
  {{ return(adapter.dispatch('build_lock_sleep_sql', 'guestdata')(seconds)) }}
{% endmacro %}

{% macro postgres__build_lock_sleep_sql(seconds) %}
  {{ return('select pg_sleep(' ~ seconds ~ ')') }}
{% endmacro %}

{% macro default__build_lock_sleep_sql(seconds) %}
  {{ return('call system$wait(' ~ seconds ~ ')') }}
{% endmacro %}

{#- on-run-end: this build's lock goes (run-operation with a holder: a dead build's). -#}
{% macro release_build_lock(holder=none) %}
  {% if holder is none and not build_lock_takes() %}
    {{ return('') }}
  {% endif %}
  {% if holder is not none and not modules.re.fullmatch('[0-9a-f-]{36}', holder | string) %}
    {{ exceptions.raise_compiler_error("holder: the invocation id the waiting build's log names") }}
  {% endif %}
  {% set lock = build_lock_relation() %}
  {% do adapter.execute(
      'update ' ~ lock ~ " set holder = null, held_since = null where lock_name = '"
      ~ target.schema ~ "' and holder = '" ~ (holder or invocation_id) ~ "'", auto_begin=true) %}
  {% do adapter.commit() %}
  {{ return('') }}
{% endmacro %}
