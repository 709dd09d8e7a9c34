"""ansible-rulebook event source: Alertmanager's webhook, one event per alert.

The rulebook (extensions/eda/rulebooks/, rendered by roles/eda_rulebook) loads it with
`ansible-rulebook --source-dir extensions/eda/plugins/event_source`. It takes the options of the
`ansible.eda.alertmanager` source and puts the same events on the queue, so one rulebook serves both: this
file where that collection cannot be installed (it is on Galaxy only, which our machines do not reach), the
collection's source in an EDA controller's decision environment.

Each alert of a notification becomes `{"alert": <the alert>, "meta": {"endpoint": ..., "headers": ...,
"hosts": [<host>]}}`; ansible-rulebook limits a playbook run to `meta.hosts`. Unlike the collection's source it
fails closed: a notification it cannot fully account for (not JSON, not Alertmanager's version 4 payload, an
alert that is not an object, a status other than firing/resolved, labels that are not strings, a host value that
is not a plain host name, such as a pattern or "all" that would widen the run, a Jinja marker anywhere) is refused whole with 400 and the
reason (field and value), and no event is put on the queue. Alerts without the host label pass without hosts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

DOCUMENTATION = r"""
---
short_description: Receive Alertmanager notifications (webhook_configs), one event per alert.
description:
  - Listens for Alertmanager's webhook notifications (payload version 4) and puts one event per alert on the
    queue, with the alert's host in meta.hosts. Options and events are those of ansible.eda.alertmanager.
  - Refuses, with HTTP 400 and the reason, any notification it cannot fully account for; nothing of it is queued.
options:
  host:
    description: Address to listen on.
    type: str
    default: "0.0.0.0"
  port:
    description: TCP port to listen on.
    type: int
    default: 5000
  data_alerts_path:
    description: Path of the list of alerts in the payload.
    type: str
    default: alerts
  data_host_path:
    description: Path of the host name in each alert; an empty string puts no hosts in meta.
    type: str
    default: labels.instance
  data_path_separator:
    description: Separator of the two paths above.
    type: str
    default: "."
  skip_original_data:
    description: Queue only the alerts, not the whole notification first.
    type: bool
    default: false
"""

LOG = logging.getLogger(__name__)
VERSION = "4"
STATUSES = ("firing", "resolved")
# A plain RFC 1123 host name: no Ansible pattern characters (, : * ! & ~ [ ]), no group that names everything.
HOST = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
WIDE = ("all", "ungrouped", "localhost")
# ansible-rulebook hands the whole event to the playbook as the extra variable ansible_eda, and Ansible renders
# extra variables as templates when a task reads them: a label or annotation carrying Jinja would run on the
# controller. Prometheus renders annotation templates before it sends, so no real alert carries these.
TEMPLATE = re.compile(r"\{\{|\{%|\{#")


class Refused(ValueError):
    """A notification this source cannot account for; the message names the field and its value."""


def _show(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _walk(data: Any, path: str, separator: str) -> tuple[bool, Any]:
    node = data
    for key in path.split(separator):
        if not isinstance(node, dict) or key not in node:
            return False, None
        node = node[key]
    return True, node


def _templates(value: Any, where: str) -> str | None:
    """The first place under value holding a Jinja marker, or None."""
    if isinstance(value, str):
        return where if TEMPLATE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, sub in items:
        if isinstance(key, str) and TEMPLATE.search(key):
            return "%s key %s" % (where, _show(key))
        found = _templates(sub, "%s[%d]" % (where, key) if isinstance(key, int) else "%s.%s" % (where, key))
        if found:
            return found
    return None


def alert_events(payload: Any, args: dict[str, Any], endpoint: str = "", headers: dict | None = None) -> list[dict]:
    """The events for one notification, or Refused naming what does not fit. Pure: no I/O."""
    sep = args.get("data_path_separator", ".")
    alerts_path = args.get("data_alerts_path", "alerts")
    host_path = args.get("data_host_path", "labels.instance")
    if not isinstance(payload, dict):
        raise Refused("payload: not a JSON object but %s" % type(payload).__name__)
    if payload.get("version") != VERSION:
        raise Refused("payload.version: %s (Alertmanager's webhook payload is version %s)"
                      % (_show(payload.get("version")), VERSION))
    found, alerts = _walk(payload, alerts_path, sep)
    if not found or not isinstance(alerts, list):
        raise Refused("payload.%s: %s (a list of alerts)" % (alerts_path, _show(alerts) if found else "missing"))
    truncated = payload.get("truncatedAlerts", 0)
    if not isinstance(truncated, int) or isinstance(truncated, bool) or truncated < 0:
        raise Refused("payload.truncatedAlerts: %s (a count)" % _show(truncated))
    marked = _templates(payload, "payload") or _templates(dict(headers or {}), "headers") or \
        _templates(endpoint, "endpoint")
    if marked:
        raise Refused("%s: holds a Jinja template marker ({{, {%% or {#), which Ansible would render" % marked)
    meta = {"endpoint": endpoint, "headers": dict(headers or {})}
    events = []
    for i, alert in enumerate(alerts):
        where = "payload.%s[%d]" % (alerts_path, i)
        if not isinstance(alert, dict):
            raise Refused("%s: %s (an alert object)" % (where, _show(alert)))
        if alert.get("status") not in STATUSES:
            raise Refused("%s.status: %s (firing or resolved)" % (where, _show(alert.get("status"))))
        labels = alert.get("labels")
        if not isinstance(labels, dict) or not labels or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise Refused("%s.labels: %s (a map of label names to strings)" % (where, _show(labels)))
        if "alertname" not in labels:
            raise Refused("%s.labels.alertname: missing" % where)
        hosts = []
        if host_path:
            found, host = _walk(alert, host_path, sep)
            if found:
                if not isinstance(host, str) or not HOST.match(host) or host.lower() in WIDE:
                    raise Refused("%s.%s: %s (a plain host name, not a pattern or a group)"
                                  % (where, host_path, _show(host)))
                hosts = [host]
        event_meta = dict(meta)
        if hosts:
            event_meta["hosts"] = hosts
        events.append({"alert": alert, "meta": event_meta})
    if truncated:
        LOG.warning("Alertmanager left %d alerts out of this notification (max_alerts)", truncated)
    return events


async def main(queue: asyncio.Queue, args: dict[str, Any]) -> None:
    from aiohttp import web  # ansible-rulebook's own dependency; the pure part above needs none

    async def receive(request: web.Request) -> web.Response:
        endpoint = request.match_info.get("endpoint", "")
        try:
            payload = json.loads(await request.text())
        except (ValueError, UnicodeDecodeError) as exc:
            reason = "payload: not JSON (%s)" % exc
            LOG.error("refused a notification on /%s: %s", endpoint, reason)
            return web.Response(status=400, text=reason + "\n")
        try:
            events = alert_events(payload, args, endpoint, dict(request.headers))
        except Refused as exc:
            LOG.error("refused a notification on /%s: %s", endpoint, exc)
            return web.Response(status=400, text="%s\n" % exc)
        if not args.get("skip_original_data", False):
            await queue.put({"payload": payload, "meta": {"endpoint": endpoint, "headers": dict(request.headers)}})
        for event in events:
            await queue.put(event)
        return web.Response(status=202, text="%d alerts\n" % len(events))

    app = web.Application()
    app.add_routes([web.post("/{endpoint:.*}", receive)])
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, args.get("host", "0.0.0.0"), int(args.get("port", 5000)))
    await site.start()
    LOG.info("alertmanager source listening on %s:%s", args.get("host", "0.0.0.0"), args.get("port", 5000))
    try:
        await asyncio.Future()
    finally:
        await runner.cleanup()
