"""tests/budgets.yml, read without PyYAML (the rig's scripts run before the venv may exist): what each stage
and lab test of make test may cost on CI's machine, and the factor past which one has hung."""

from pathlib import Path

BUDGETS = Path(__file__).resolve().parents[1] / "tests" / "budgets.yml"
# A stage or lab test still running at this many times its budget has hung: it is stopped and named.
HARD_LIMIT_FACTOR = 3


def read(path=BUDGETS):
    """{'total': s, 'ceiling': s, 'stages': {name: s}, 'lab_tests': {name: s}} from the file's flat layout."""
    out, section = {"stages": {}, "lab_tests": {}}, None
    for line in path.read_text().splitlines() if path.exists() else []:
        text = line.split("#")[0].rstrip()
        if ":" not in text:  # blank, a comment, the document start
            continue
        key, _, value = text.strip().rpartition(":")
        if not line.startswith(" "):
            section = key
            if value.strip():
                out[key] = int(value)
        elif section in out and isinstance(out[section], dict):
            out[section][key.strip('"')] = int(value)
    return out


def hard_limit(budget):
    return int(budget * HARD_LIMIT_FACTOR)
