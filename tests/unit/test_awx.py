# -*- coding: utf-8 -*-
"""AWX integration without an AWX: the execution environment builds its context with ansible-builder,
the requirements files AWX reads agree with the top-level ones, and playbooks/awx/configure.yml renders
(awx_render_only=true) job templates, surveys, the workflow graph and the BMC credential type that point
at what this repository really has, with no secret in the payloads."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
AWX_MODULES = Path(__import__('ansible_collections.awx.awx', fromlist=['x']).__path__[0]) / 'plugins' / 'modules'
SECRETS = {'controller_oauthtoken': 'Tok3n-S3NTINEL-c0ntroller', 'awx_bmc_password': 'Bmc-S3NTINEL-pa55word',
           'awx_bmc_username': 'bmc-S3NTINEL-user'}
SURVEY_TYPES = {'text', 'textarea', 'password', 'integer', 'float', 'multiplechoice', 'multiselect'}


def _pins():
    pins = {}
    for line in (REPO / 'requirements.txt').read_text().splitlines():
        line = line.split('#', 1)[0].strip()
        if line:
            name, _, version = line.partition('==')
            pins[re.sub(r'\[.*\]', '', name).lower()] = version
    return pins


def _yaml(path):
    return yaml.safe_load((REPO / path).read_text())


def _ee():
    # execution-environment.yml has no Ansible tags; plain YAML reads it as ansible-builder does.
    return _yaml('execution-environment.yml')


def _run(args, **kwargs):
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               CONTROLLER_OAUTH_TOKEN=SECRETS['controller_oauthtoken'])
    return subprocess.run(args, cwd=str(REPO), env=env, check=False, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=300, **kwargs)


# --- Execution environment and requirements files ---------------------------------------------------

def test_ee_pins_match_requirements_txt():
    ee, pins = _ee(), _pins()
    assert ee['version'] == 3
    assert ee['dependencies']['ansible_core']['package_pip'] == 'ansible-core==' + pins['ansible-core']
    assert ee['dependencies']['ansible_runner']['package_pip'] == 'ansible-runner==' + pins['ansible-runner']
    for req in ee['dependencies']['python']:
        name, _, version = req.partition('==')
        assert pins.get(name.lower()) == version, '%s: requirements.txt pins %s' % (req, pins.get(name.lower()))
    assert ee['dependencies']['galaxy'] == 'collections/requirements.yml'
    assert 'netaddr' in [r.partition('==')[0] for r in ee['dependencies']['python']]


def test_ee_bindep_names_the_tools():
    lines = [l.split('#', 1)[0].strip() for l in (REPO / _ee()['dependencies']['system']).read_text().splitlines()]
    names = {l.split()[0] for l in lines if l}
    assert {'openssh-clients', 'openssh-client', 'iputils', 'iputils-ping', 'ipmitool'} <= names


def test_ansible_builder_create(tmp_path):
    context = tmp_path / 'context'
    proc = _run([str(BIN / 'ansible-builder'), 'create', '--file', 'execution-environment.yml',
                 '--context', str(context), '--output-filename', 'Containerfile'])
    assert proc.returncode == 0, proc.stdout
    containerfile = (context / 'Containerfile').read_text()
    assert 'ansible-core==%s' % _pins()['ansible-core'] in containerfile
    assert 'ansible-runner==%s' % _pins()['ansible-runner'] in containerfile
    assert 'ARG EE_BASE_IMAGE="quay.io/centos/centos:stream9"' in containerfile
    assert re.search(r'ansible-galaxy collection install .*-r requirements\.yml', containerfile), containerfile
    assert yaml.safe_load((context / '_build' / 'requirements.yml').read_text()) == _yaml('collections/requirements.yml')
    assert (context / '_build' / 'bindep.txt').read_text() == (REPO / 'bindep.txt').read_text()
    assert 'netaddr==' + _pins()['netaddr'] in (context / '_build' / 'requirements.txt').read_text()


def test_collections_requirements_match_top_level():
    assert _yaml('collections/requirements.yml') == _yaml('requirements.yml')


def test_requirements_pin_the_collections_the_code_uses_at_the_installed_versions():
    """Online installs (Galaxy) get what CI tests: every collection the playbooks, roles and lab name by FQCN
    is listed, at the version the pinned ansible package carries."""
    pinned = {c['name']: c['version'] for c in _yaml('requirements.yml')['collections']}
    used = set()
    for path in list((REPO / 'playbooks').rglob('*.yml')) + list((REPO / 'roles').rglob('*.yml')):
        used |= set(re.findall(r'^\s*-?\s*((?!ansible\.builtin\.)[a-z_]+\.[a-z_]+)\.[a-z_]+:\s*$',
                               path.read_text(), re.M))
    assert used - set(pinned) == set(), used - set(pinned)
    assert 'awx.awx' in used
    for name, version in pinned.items():
        namespace, collection = name.split('.')
        manifest = Path(__import__('ansible_collections.%s.%s' % (namespace, collection),
                                   fromlist=['x']).__path__[0]) / 'MANIFEST.json'
        assert json.loads(manifest.read_text())['collection_info']['version'] == version, name


def test_roles_requirements_install_nothing(tmp_path):
    assert _yaml('roles/requirements.yml') == {'roles': []}
    proc = _run([str(BIN / 'ansible-galaxy'), 'role', 'install', '-r', 'roles/requirements.yml', '-p', str(tmp_path)])
    assert proc.returncode == 0, proc.stdout
    assert list(tmp_path.iterdir()) == []


# --- The rendered AWX objects -------------------------------------------------------------------------

def test_configure_syntax_check():
    proc = _run([str(BIN / 'ansible-playbook'), '-i', 'localhost,', '--syntax-check', 'playbooks/awx/configure.yml'])
    assert proc.returncode == 0, proc.stdout


@pytest.fixture(scope='module')
def rendered(tmp_path_factory):
    dest = tmp_path_factory.mktemp('awx') / 'awx_objects.json'
    extra = dict(SECRETS, awx_render_only=True, awx_render_dest=str(dest), ansible_python_interpreter=sys.executable,
                 awx_project_scm_url='https://git.example.com/gpu-cluster.git', awx_verify_job_slice_count='3',
                 awx_readiness_publish_dir='/mnt/readiness', awx_machine_credential='gpu-lab ssh',
                 controller_host='https://awx.example.com')
    return _render(dest, extra)


def _render(dest, extra):
    proc = _run([str(BIN / 'ansible-playbook'), '-i', 'localhost,', 'playbooks/awx/configure.yml',
                 '-e', json.dumps(extra)])
    assert proc.returncode == 0, proc.stdout
    assert not re.search(r'\[(WARNING|DEPRECATION WARNING)\]', proc.stdout), proc.stdout
    text = dest.read_text()
    return {'text': text, 'log': proc.stdout, **json.loads(text)}


def _templates(rendered):
    return {jt['playbook'].rsplit('/', 1)[-1][:-4]: jt for jt in rendered['job_templates']}


def test_no_secret_in_rendered_payloads_or_log(rendered):
    for name, value in SECRETS.items():
        assert value not in rendered['text'], name
        assert value not in rendered['log'], name


def test_job_templates_are_the_five_playbooks(rendered):
    assert sorted(_templates(rendered)) == ['merge_readiness', 'remediate', 'rolling_update', 'site', 'verify']


@pytest.mark.parametrize('playbook', ['site', 'verify', 'rolling_update', 'remediate', 'merge_readiness'])
def test_job_template_playbook_exists(rendered, playbook):
    assert (REPO / _templates(rendered)[playbook]['playbook']).is_file()


def test_job_templates_common_settings(rendered):
    for jt in rendered['job_templates']:
        assert jt['allow_simultaneous'] is False, jt['name']
        # merge takes its limit from the slices' artifacts (readiness_run_limit)
        assert jt['ask_limit_on_launch'] is (not jt['playbook'].endswith('merge_readiness.yml')), jt['name']
        assert jt['project'] == rendered['project']['name']
        assert jt['inventory'] == rendered['inventory']['name']
        assert jt['organization'] == rendered['project']['organization']
        assert jt['credentials'] == ['gpu-lab ssh', rendered['credential']['name']]
        assert isinstance(jt['job_slice_count'], int)
    jts = _templates(rendered)
    assert jts['verify']['job_slice_count'] == 3
    assert jts['verify']['ask_job_slice_count_on_launch'] is True
    assert all(jt['job_slice_count'] == 1 for name, jt in jts.items() if name != 'verify')
    # the EDA controller's rulebook passes the alert as remediate_alert, to remediate only
    assert {name for name, jt in jts.items() if jt.get('ask_variables_on_launch')} == {'remediate'}


def _played_vars(playbook):
    """Text of a playbook and of everything it imports, plus the roles it names (their tasks and defaults)."""
    seen, texts, todo = set(), [], [REPO / 'playbooks' / playbook]
    while todo:
        path = todo.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        text = path.read_text()
        texts.append(text)
        todo += [path.parent / m for m in re.findall(r'import_playbook:\s*(\S+\.yml)', text)]
        for role in re.findall(r'(?:role|name):\s*([a-z_]+)\s*$', text, re.M):
            if (REPO / 'roles' / role).is_dir():
                todo += sorted((REPO / 'roles' / role).glob('*/*.yml'))
    return '\n'.join(texts)


def test_surveys_are_valid(rendered):
    for jt in rendered['job_templates']:
        if not jt['survey_enabled']:
            assert jt['survey_spec'] == {}, jt['name']
            continue
        spec = jt['survey_spec']
        assert spec['name'] and isinstance(spec['description'], str) and spec['spec'], jt['name']
        variables = [q['variable'] for q in spec['spec']]
        assert len(variables) == len(set(variables)), jt['name']
        played = _played_vars(jt['playbook'].split('/', 1)[1])
        for q in spec['spec']:
            where = '%s: %s' % (jt['name'], q.get('variable'))
            assert {'question_name', 'variable', 'type', 'required'} <= set(q), where
            assert q['type'] in SURVEY_TYPES, where
            assert isinstance(q['required'], bool), where
            assert re.fullmatch(r'[a-z][a-z0-9_]*', q['variable']), where
            assert re.search(r'\b%s\b' % q['variable'], played), where + ' is read by no play or role'
            if q['type'] == 'integer':
                assert isinstance(q['min'], int) and isinstance(q['max'], int), where
                assert q['min'] <= q.get('default', q['min']) <= q['max'], where


def _question(rendered, playbook, variable):
    return next(q for q in _templates(rendered)[playbook]['survey_spec']['spec'] if q['variable'] == variable)


def test_batch_and_version_questions(rendered):
    batch = _question(rendered, 'site', 'node_baseline_reboot_batch')
    assert (batch['type'], batch['required'], batch['min'], batch['max'], batch['default']) == ('integer', True, 1, 32, 8)
    capacity = _question(rendered, 'rolling_update', 'rolling_update_min_capacity_percent')
    assert capacity['type'] == 'integer' and 1 <= capacity['min'] <= capacity['default'] <= capacity['max'] <= 99
    version = _question(rendered, 'rolling_update', 'inference_runtime_version')
    assert version['type'] == 'text' and version['required'] is True and version['min'] >= 1
    assert 'default' not in version


def _edges(wf, names):
    nodes = {n['identifier']: n for n in wf['workflow_nodes']}
    assert len(nodes) == len(wf['workflow_nodes'])
    for node in nodes.values():
        assert node['unified_job_template']['type'] == 'job_template'
        assert node['unified_job_template']['name'] in names, node['identifier']
        for kind, targets in node['related'].items():
            assert all(t['identifier'] in nodes for t in targets), (node['identifier'], kind)
    return nodes, {(n['identifier'], kind, t['identifier'])
                   for n in nodes.values() for kind, ts in n['related'].items() for t in ts}


def test_workflow_site_verify_merge_remediate(rendered):
    """Sliced verify (3 slices here): merge runs whatever the slices did, and its failure starts remediate."""
    wf = rendered['workflow']
    assert wf['allow_simultaneous'] is False and wf['ask_limit_on_launch'] is True
    jts = _templates(rendered)
    nodes, edges = _edges(wf, {jt['name'] for jt in rendered['job_templates']})
    assert edges == {('site', 'success_nodes', 'verify'), ('verify', 'always_nodes', 'merge_readiness'),
                     ('merge_readiness', 'failure_nodes', 'remediate')}
    assert {i: n['unified_job_template']['name'] for i, n in nodes.items()} == {
        i: jts[i]['name'] for i in ('site', 'verify', 'merge_readiness', 'remediate')}
    for name in ('verify', 'merge_readiness'):
        assert jts[name]['extra_vars'] == {'readiness_report_publish_dir': '/mnt/readiness'}, name
    assert jts['remediate']['extra_vars'] == {'remediate_reports_dir': '/mnt/readiness/remediation'}


def test_workflow_of_one_verify_job_has_no_merge(tmp_path):
    dest = tmp_path / 'awx_objects.json'
    rendered = _render(dest, dict(SECRETS, awx_render_only=True, awx_render_dest=str(dest),
                                  ansible_python_interpreter=sys.executable))
    nodes, edges = _edges(rendered['workflow'], {jt['name'] for jt in rendered['job_templates']})
    assert edges == {('site', 'success_nodes', 'verify'), ('verify', 'failure_nodes', 'remediate')}
    assert set(nodes) == {'site', 'verify', 'remediate'}
    assert _templates(rendered)['remediate']['extra_vars'] == {}  # no share: the job's own reports/


def test_sliced_verify_without_a_share_is_refused(tmp_path):
    proc = _run([str(BIN / 'ansible-playbook'), '-i', 'localhost,', 'playbooks/awx/configure.yml', '-e',
                 json.dumps(dict(awx_render_only=True, awx_render_dest=str(tmp_path / 'x.json'),
                                 awx_verify_job_slice_count=4, ansible_python_interpreter=sys.executable))])
    assert proc.returncode != 0
    assert 'awx_verify_job_slice_count=4 needs awx_readiness_publish_dir' in proc.stdout, proc.stdout
    assert not (tmp_path / 'x.json').exists()


def test_bmc_credential_type(rendered):
    ct = rendered['credential_type']
    assert ct['kind'] == 'cloud'
    fields = {f['id']: f for f in ct['inputs']['fields']}
    assert fields['bmc_password']['secret'] is True
    assert not fields['bmc_username'].get('secret', False)
    assert set(ct['inputs']['required']) == {'bmc_username', 'bmc_password'}
    # The injector templates reach AWX literally, and name the variables roles/bmc_power reads.
    assert ct['injectors'] == {'extra_vars': {v: '{{ %s }}' % v for v in ('bmc_username', 'bmc_password')}}
    tasks = '\n'.join(p.read_text() for p in (REPO / 'roles' / 'bmc_power' / 'tasks').glob('*.yml'))
    assert '{{ bmc_username }}' in tasks and '{{ bmc_password }}' in tasks
    assert rendered['credential']['credential_type'] == ct['name']
    assert 'inputs' not in rendered['credential']


def test_project_and_inventory_source(rendered):
    project, source = rendered['project'], rendered['inventory_source']
    assert (project['scm_type'], project['scm_url']) == ('git', 'https://git.example.com/gpu-cluster.git')
    assert source['source'] == 'scm' and source['source_project'] == project['name']
    assert source['inventory'] == rendered['inventory']['name']
    assert (REPO / source['source_path']).is_file()
    assert source['source_path'] == 'inventories/lab/hosts.yml'


def _module_options(module):
    text = (AWX_MODULES / (module + '.py')).read_text()
    doc = yaml.safe_load(re.search(r"DOCUMENTATION = r?'''(.*?)'''", text, re.S).group(1))
    return doc['options']


def _awx_tasks():
    play = yaml.safe_load((REPO / 'playbooks' / 'awx' / 'configure.yml').read_text())[0]
    for task in [t for top in play['tasks'] for t in top.get('block', [top])]:
        for key, args in task.items():
            if key.startswith('awx.awx.'):
                yield key.split('.')[-1], args


def test_configure_passes_only_documented_module_options():
    tasks = list(_awx_tasks())
    assert {m for m, _ in tasks} == {'credential_type', 'credential', 'execution_environment', 'project', 'inventory',
                                     'inventory_source', 'job_template', 'workflow_job_template'}
    for module, args in tasks:
        unknown = set(args) - set(_module_options(module))
        assert not unknown, '%s: %s' % (module, sorted(unknown))


@pytest.mark.parametrize('key,module', [
    ('credential_type', 'credential_type'), ('credential', 'credential'), ('project', 'project'),
    ('execution_environment', 'execution_environment'), ('inventory', 'inventory'),
    ('inventory_source', 'inventory_source'), ('workflow', 'workflow_job_template')])
def test_payload_keys_are_module_options(rendered, key, module):
    unknown = set(rendered[key]) - set(_module_options(module))
    assert not unknown, '%s: %s' % (module, sorted(unknown))


def test_job_template_payload_keys_are_consumed(rendered):
    options = set(_module_options('job_template'))
    passed = dict(_awx_tasks())['job_template']
    for jt in rendered['job_templates']:
        assert set(jt) <= options, sorted(set(jt) - options)
        assert set(jt) <= set(passed), sorted(set(jt) - set(passed))


def test_workflow_nodes_use_documented_suboptions(rendered):
    sub = _module_options('workflow_job_template')['workflow_nodes']['suboptions']
    for node in rendered['workflow']['workflow_nodes']:
        assert set(node) <= set(sub) | {'related'}, sorted(set(node) - set(sub))


def test_controller_connection_from_variables():
    play = yaml.safe_load((REPO / 'playbooks' / 'awx' / 'configure.yml').read_text())[0]
    defaults = play['module_defaults']['group/awx.awx.controller']
    fragment = (AWX_MODULES.parent / 'doc_fragments' / 'auth.py').read_text()
    options = yaml.safe_load(re.search(r"DOCUMENTATION = r?'''(.*?)'''", fragment, re.S).group(1))['options']
    assert set(defaults) <= set(options)
    assert defaults['controller_host'] == '{{ controller_host }}'
    assert defaults['controller_oauthtoken'] == '{{ controller_oauthtoken }}'
    # The token travels only as a module option, which awx.awx marks no_log; the credential task that
    # carries the BMC password is no_log itself.
    api = (AWX_MODULES.parent / 'module_utils' / 'controller_api.py').read_text()
    assert re.search(r"controller_oauthtoken=dict\([^)]*no_log=True", api, re.S)
    credential = next(t for top in play['tasks'] for t in top.get('block', [top]) if 'awx.awx.credential' in t)
    assert credential['no_log'] is True
