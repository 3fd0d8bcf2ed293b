"""Every setting a user gives ``fedmc run`` is named in errors by a flag the command accepts:
the table from a field to its flag (``fedmc.cli.options.flag``) covers every field of what
the user asked (``RunOptions``) and of the settings made from it (the data's, the schedule's,
user-level DP's, as ``dp.FIELD``), issue 37."""

from __future__ import annotations

import pytest
import typer

from fedmc.cli import app
from fedmc.cli.options import flag
from fedmc.federation.settings import Schedule
from fedmc.privacy.accounting import UserDP
from fedmc.run.data_settings import DataSettings
from fedmc.run.options import RunOptions

ACCEPTED = {opt for param in typer.main.get_command(app).commands["run"].params
            for opt in param.opts}
# fields of the settings made from the options that no option of that name sets: the
# schedule's eval_k (resolve takes --ranking-k), its dp (the --dp-* options, each field
# checked below)
NOT_TYPED = {"eval_k", "dp"}


def _accepted(text: str) -> bool:
    """A flag ``fedmc run`` takes (``--param name=...`` is an algorithm parameter's, not a
    run setting's)."""
    first = text.split()[0]
    return not text.startswith("--param ") and (first in ACCEPTED
                                                or first.split("/")[0] in ACCEPTED)


@pytest.mark.parametrize("name", sorted(RunOptions.model_fields))
def test_every_option_field_maps_to_a_flag_fedmc_run_takes(name):
    assert _accepted(flag(name)), flag(name)


@pytest.mark.parametrize("name", sorted({*DataSettings.model_fields, *Schedule.model_fields}
                                        - NOT_TYPED))
def test_every_field_of_the_data_and_the_schedule_maps_to_a_flag(name):
    assert _accepted(flag(name)), (name, flag(name))


@pytest.mark.parametrize("name", sorted(UserDP.model_fields))
def test_every_field_of_user_level_dp_maps_to_its_dp_flag(name):
    assert flag(f"dp.{name}").startswith("--dp-") and _accepted(flag(f"dp.{name}"))
