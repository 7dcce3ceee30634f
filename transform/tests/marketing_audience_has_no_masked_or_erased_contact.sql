-- Never send marketing to a masked contact (spec 2.3/2.8: asterisks) or to a member erased
-- under GDPR. Either would be a bug in the model, so it errors. The failing rows name no one
-- (they are kept: store_failures), only the account.
{{ config(
    severity='error',
    meta={'advice': "marketing_audience holds a masked or erased contact: do not export it; report this as a bug of the models."}
) }}

select audience.source_relation, 'masked' as problem
from {{ ref('marketing_audience') }} as audience
where {{ is_masked('audience.email', 'audience.phone') }}

-- one equality join per contact field (an `or` in the join would compare every pair)
{%- for field in ['contact_key', 'phone'] %}

union all

select audience.source_relation, 'anonymised member' as problem
from {{ ref('marketing_audience') }} as audience
inner join {{ ref('stg_guestdata__members') }} as members
    on members.source_relation = audience.source_relation
    and members.member_status = 'anonymised'
    and members.{{ field }} = audience.{{ field }}
{%- endfor %}
