{#- Each account's first London day read (docs/tap.md, "What a start_date reads"): the earliest
    day a recorded read of its guests covers (read_windows). A start_date cuts every windowed
    stream of a run alike, so that day stands for all of them. No recorded read: no row, and the
    models take the history as whole. -#}
{% macro accounts_read_from() -%}
select source_relation, min(covered_from_day) as read_from_day
from {{ ref('stg_guestdata__guest_reads') }}
group by source_relation
{%- endmacro %}
