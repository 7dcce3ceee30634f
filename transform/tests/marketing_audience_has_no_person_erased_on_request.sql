-- Never send marketing to a person erased on request (macros/erasure.sql): their hashed email
-- or phone is in the suppression table. The failing rows name no one.
{{ config(
    severity='error',
    meta={'advice': "marketing_audience holds a person whose erasure was requested: do not export it. Run `dbt build` again (it erases them again first) and report this as a bug of the models."}
) }}
{%- set contexts = erasure_contexts() if execute else [] %}

select audience.source_relation, 'erased on request' as problem, audience.last_visit_at
from {{ ref('marketing_audience') }} as audience
where 1 = 0
{%- for erasures in contexts %}
    or (lower(audience.source_relation) = '{{ erasures.account }}'
        and {{ erasure_match(erasures, email='audience.email', phone='audience.phone') }})
{%- endfor %}
