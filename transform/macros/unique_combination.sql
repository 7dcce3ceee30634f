{#- A composite primary key is unique (dbt_utils has one; this project needs no packages). -#}
{% test guestdata_unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as rows_with_this_key
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}
