"""Every number setting of the tap can be given as an environment variable through Meltano.

Meltano 4.4 turns a `kind: decimal` setting read from the environment into a Decimal and then
fails to write the tap's config ("Object of type Decimal is not JSON serializable"), so the
run dies before the tap starts; meltano.yml and the plugin definition declare them `integer`.
"""

from __future__ import annotations

import json

from support.pipeline import MeltanoProject

NUMBER_SETTINGS = {
    "rate_limit_window_seconds": 15,
    "request_timeout_seconds": 45,
    "state_interval_seconds": 5,
    "progress_interval_seconds": 7,
}


def test_number_settings_from_the_environment_reach_the_tap(meltano: MeltanoProject) -> None:
    env = {f"TAP_GUESTDATA_{name.upper()}": str(value) for name, value in NUMBER_SETTINGS.items()}
    result = meltano.run("invoke", "--dump=config", "tap-guestdata", extra_env=env)
    config = json.loads(result.stdout[result.stdout.index("{") :])
    assert {name: config[name] for name in NUMBER_SETTINGS} == NUMBER_SETTINGS
