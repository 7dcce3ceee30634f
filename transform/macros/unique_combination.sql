{#- A composite primary key is unique (dbt_utils has one; this project needs no packages). -#}
{% test guestdata_unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as rows_with_this_key
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}

{#- A key is unique within each account (ids are the API's, unique per account only). -#}
{% test guestdata_unique_in_account(model, column_name) %}
select source_relation, {{ column_name }}, count(*) as rows_with_this_key
from {{ model }}
where {{ column_name }} is not null
group by source_relation, {{ column_name }}
having count(*) > 1
{% endtest %}

{#- Every value names a row of `to` in the same account (dbt's relationships, account-scoped). -#}
{% test guestdata_relationships_in_account(model, column_name, to, field) %}
select child.source_relation, child.{{ column_name }}
-- a subquery: `model` may be one already (a test's where, macros/data_test_scope.sql)
from (select * from {{ model }}) as child
left join {{ to }} as parent
    on parent.source_relation = child.source_relation
    and parent.{{ field }} = child.{{ column_name }}
where child.{{ column_name }} is not null and parent.{{ field }} is null
{% endtest %}
