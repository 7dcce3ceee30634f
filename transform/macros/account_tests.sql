{#- The project's generic tests. Each one's failing rows name their account first
    (source_relation) and hold keys or values only, never a person's contact: they are kept
    (store_failures), and guestdata_account_status reads the account from them
    (macros/account_status.sql). dbt's own not_null, unique, relationships and accepted_values
    name no account (and not_null keeps whole rows), so the project has its own. -#}

{#- A composite primary key is unique (dbt_utils has one; this project needs no packages). -#}
{% test guestdata_unique_combination(model, columns) %}
select {{ columns | join(', ') }}, count(*) as rows_with_this_key
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}

{#- A key is unique within each account (ids are the API's, unique per account only).
    personal: the key is a person's contact, and stays out of the kept rows. -#}
{% test guestdata_unique_in_account(model, column_name, personal=false) %}
select source_relation{% if not personal %}, {{ column_name }}{% endif %}, count(*) as rows_with_this_key
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

{#- dbt's not_null, per account: how many rows of each lack the value. -#}
{% test guestdata_not_null(model, column_name) %}
select source_relation, count(*) as rows_without_it
from {{ model }}
where {{ column_name }} is null
group by source_relation
{% endtest %}

{#- dbt's accepted_values, per account. -#}
{% test guestdata_accepted_values(model, column_name, values) %}
select source_relation, {{ column_name }} as value_field, count(*) as rows_with_it
from {{ model }}
where {{ column_name }} is not null
    and {{ column_name }} not in ('{{ values | join("', '") }}')
group by source_relation, {{ column_name }}
{% endtest %}
