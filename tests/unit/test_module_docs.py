"""Every custom module's DOCUMENTATION/EXAMPLES/RETURN parse, and its documented options are its argument_spec."""

import importlib
import os
from unittest import mock

import pytest
import yaml
from ansible.module_utils import basic

from conftest import LIBRARY

MODULES = sorted(f[:-3] for f in os.listdir(LIBRARY) if f.endswith('.py'))


class _Spec(Exception):
    pass


def _argument_spec(name):
    module = importlib.import_module(name)

    def capture(self, argument_spec, **kwargs):
        raise _Spec(argument_spec, kwargs)

    with mock.patch.object(basic.AnsibleModule, '__init__', capture):
        with pytest.raises(_Spec) as exc:
            module.main()
    return module, exc.value.args[0], exc.value.args[1]


def _options(spec_or_doc, doc=False):
    out = {}
    for key, value in (spec_or_doc or {}).items():
        sub = value.get('suboptions' if doc else 'options')
        out[key] = (value.get('type', 'str'), _options(sub, doc) if sub else None)
    return out


@pytest.mark.parametrize('name', MODULES)
def test_docs_parse_and_match_the_argument_spec(name):
    module, spec, kwargs = _argument_spec(name)
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc['module'] == name and doc['short_description'] and doc['description']
    assert yaml.safe_load(module.EXAMPLES), name
    returned = yaml.safe_load(module.RETURN)
    assert isinstance(returned, dict) and returned, name
    assert all('description' in v and 'returned' in v for v in returned.values()), name
    assert _options(doc.get('options'), doc=True) == _options(spec), name
    assert kwargs.get('supports_check_mode') is True, name


CHECK_MODULES = ['dcgm_diag', 'gpu_health', 'nccl_bandwidth', 'nvlink_topology', 'rdma_health', 'redfish_power']


@pytest.mark.parametrize('name', CHECK_MODULES)
def test_check_modules_document_the_one_result_format(name):
    ret = yaml.safe_load(importlib.import_module(name).RETURN)
    checks = ret['checks']
    assert checks['type'] == 'list' and checks['elements'] == 'dict'
    assert set(checks['contains']) == {'name', 'subject', 'status', 'measured', 'expected', 'reason'}
    assert 'docs/DESIGN.md' in ' '.join(checks['description'])
    assert ret['verdict']['type'] == 'str'
    with open(os.path.join(os.path.dirname(LIBRARY), 'docs', 'DESIGN.md')) as handle:
        assert '`%s`' % name in handle.read().split('## Check results', 1)[1].split('\n## ', 1)[0]
