{#- Generated from tap_guestdata/run/catalog.py by scripts/build_docs.py; do not edit
    (its --check, run by tests/test_readme.py, fails when it is out of step). Each
    stream that holds a person's contact, and what erasure and source deletions
    leave in each of its fields: the placeholder (erasure_placeholder) or null. -#}
{% macro personal_fields() %}
  {{ return({
      'guests': {'name': 'placeholder', 'first_name': 'placeholder', 'last_name': none, 'email': 'placeholder', 'phone': 'placeholder'},
      'members': {'first_name': 'placeholder', 'last_name': none, 'email': 'placeholder', 'phone_e164': 'placeholder', 'date_of_birth': none},
  }) }}
{% endmacro %}
