{#- A venue-day whose guest rows and API stats differ in visits only because guests were deleted
    in the API between the two reads (spec 1: a deleted guest leaves the API and its /stats):
    - more rows than the API counts, and the newest complete read of the day's guests started
      before the stats were read (or there is none): the next read covering the day flags them
      (macros/source_deletions.sql);
    - fewer rows, and a complete read of the day's guests finished after its stats were read:
      the stats are stale, and the next read of the day's stats matches. Only a trusted read
      counts (the warehouse holds every row it returned), so a lost row never looks like this.
    Unknown (a null) is no explanation. Both reconciliation tests use this one rule: the error test for every other difference, the
    warning test for these. -#}
{% macro visits_differ_by_source_deletions() -%}
coalesce((
    (visits > api_visits
        and (guests_read_started_at is null or guests_read_started_at < api_stats_read_at))
    or (visits < api_visits and guests_read_completed_at > api_stats_read_at)
), false)
{%- endmacro %}

{% macro visits_reconciled_venue_days() -%}
has_api_stats and api_stats_final and is_complete_day
{%- endmacro %}
