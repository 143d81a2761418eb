"""Every command the provider's configuration descriptions name is one its command line has."""

from __future__ import annotations

import re

from airflow_provider_sms import get_provider_info
from airflow_provider_sms.__main__ import build_parser

COMMAND = re.compile(r"python -m (airflow_provider_sms[\w.]*) ([\w-]+)")


def descriptions() -> list[str]:
    return [
        option["description"]
        for section in get_provider_info()["config"].values()
        for option in section["options"].values()
    ]


def test_each_command_a_description_names_exists() -> None:
    named = [match.groups() for text in descriptions() for match in COMMAND.finditer(text)]

    assert named, "no description names a command: the check would pass on nothing"
    assert all(module == "airflow_provider_sms" for module, _ in named), named
    for _, command in named:
        assert build_parser().parse_args([command]).command == command  # argparse exits on an unknown one
