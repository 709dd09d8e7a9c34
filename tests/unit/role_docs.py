"""Shared checks that a role's documentation matches its code: defaults/main.yml, meta/argument_specs.yml
and the README's variable table (used by the monitoring, power and inference role tests)."""

import re
from pathlib import Path

import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"


def spec(role):
    return yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]


def defaults(role):
    return yaml.safe_load((ROLES / role / "defaults" / "main.yml").read_text())


def readme_table(role):
    """The text of the README's '## Variables' section."""
    return (ROLES / role / "README.md").read_text().split("## Variables", 1)[1].split("\n## ", 1)[0]


def readme_variables(role):
    return re.findall(r"^\| `([a-z_]+)` \|", readme_table(role), re.M)


def assert_defaults_specified(role, templated_described=True):
    """Every default is in the spec with the same literal default. With templated_described, a templated
    default ('{{ ... }}') is described in the spec, not copied there. Role inputs without a default are the
    inventory's (hardware_profile, ...), never the role's own."""
    options, values = spec(role), defaults(role)
    assert set(values) - set(options) == set()
    for name, value in values.items():
        if templated_described and isinstance(value, str) and "{{" in value:
            assert "default" not in options[name], "%s: a templated default is described, not copied" % name
        else:
            assert options[name].get("default") == value, name
    assert [n for n in set(options) - set(values) if n.startswith(role + "_")] == []


def assert_readme_lists(role, options):
    """The README's variable table lists exactly these options, each once; returns them."""
    documented = readme_variables(role)
    assert sorted(documented) == sorted(options)
    assert len(documented) == len(set(documented))
    return documented
