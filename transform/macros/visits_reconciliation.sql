{#- A venue-day whose guest rows and API stats differ in visits only because guests were deleted
    in the API between the two reads (spec 1: a deleted guest leaves the API and its /stats):
    - more rows than the API counts, and no complete read of the day's guests since the stats
      were read: the next read covering the day flags them (macros/source_deletions.sql);
    - fewer rows, and the day's guests were read in full after its stats: the stats are stale,
      and the next read of the day's stats matches.
    Both reconciliation tests use this one rule: the error test for every other difference, the
    warning test for these. -#}
{% macro visits_differ_by_source_deletions() -%}
(
    (visits > api_visits
        and (guests_confirmed_at is null or guests_confirmed_at < api_stats_read_at))
    or (visits < api_visits and guests_confirmed_at > api_stats_read_at)
)
{%- endmacro %}

{% macro visits_reconciled_venue_days() -%}
has_api_stats and api_stats_final and is_complete_day
{%- endmacro %}
