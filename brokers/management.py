"""A small client for the RabbitMQ management HTTP API: what verify, demo, bench and the tests read and write.

Only the calls this project needs: overview and feature flags (broker requirements), the exchanges,
queues, bindings and (operator) policies of a vhost, a user with its permissions and topic permissions,
definitions export/import, and vhost creation for isolated runs.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import requests


class ManagementError(RuntimeError):
    """The management API refused or failed a call; the message names the call and the broker's answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status, None when the API could not be reached at all


_OS_REASON = re.compile(r"\[Errno -?\d+\][^'\")]*|\[SSL: [^\]]+\][^'\")]*|Read timed out|Connect(?:ion)? timed out")


def request_failure_reason(error: requests.RequestException) -> str:
    """``[Errno 111] Connection refused`` out of requests' long ``HTTPConnectionPool(…): Max retries …`` text."""
    text = str(error)
    found = _OS_REASON.findall(text)
    return found[-1].strip() if found else (text.splitlines() or [type(error).__name__])[0]


def http_failure_reason(response: requests.Response) -> str:
    """``401 Unauthorized: Login failed``: the status and the API's own ``reason`` (or the start of the body)."""
    reason = response.text[:300].strip()
    try:
        body = response.json()
        if isinstance(body, dict):
            reason = str(body.get("reason") or body.get("error") or reason)
    except ValueError:
        pass
    return (
        f"{response.status_code} {response.reason}: {reason}" if reason else f"{response.status_code} {response.reason}"
    )


def path_segment(value: str) -> str:
    """One URL path segment of the management API (``/`` in a vhost or name becomes ``%2F``)."""
    return quote(value, safe="")


@dataclass
class ManagementApi:
    """``verify_tls``: True, False (no certificate check) or a CA bundle path; ``client_cert``: cert[, key]."""

    url: str
    username: str = "guest"
    password: str = "guest"
    verify_tls: bool | str = True
    client_cert: str | tuple[str, str] | None = None
    timeout: float = 30
    session: requests.Session = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.session = requests.Session()
        self.session.auth = (self.username, self.password)

    def send(self, method: str, path: str, body: Any = None) -> requests.Response:
        """One call; the response (headers included) when the status is below 400, else ``ManagementError``."""
        address = f"{self.url.rstrip('/')}/api/{path}"
        try:
            # TLS settings per request: requests lets REQUESTS_CA_BUNDLE override a session's ``verify``.
            response = self.session.request(
                method, address, json=body, timeout=self.timeout, verify=self.verify_tls, cert=self.client_cert
            )
        except requests.RequestException as error:
            raise ManagementError(
                f"cannot reach the RabbitMQ management API at {self.address} as {self.username!r}: "
                f"{request_failure_reason(error)}"
            ) from None
        if response.status_code >= 400:
            raise ManagementError(
                f"RabbitMQ management API at {self.address} answered {method} /api/{path} for user "
                f"{self.username!r} with {http_failure_reason(response)}",
                response.status_code,
            )
        return response

    def copy(self) -> ManagementApi:
        """The same broker, user and TLS settings on a session of its own: for a read on another thread (a
        ``requests.Session`` is not meant to be shared between threads)."""
        return dataclasses.replace(self)

    def request(self, method: str, path: str, body: Any = None) -> Any:
        response = self.send(method, path, body)
        return response.json() if response.content else None

    @property
    def address(self) -> str:
        """``host:port`` of the management URL (the whole URL if it has no host)."""
        parsed = urlsplit(self.url)
        try:
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
        except ValueError:
            return self.url
        return f"{parsed.hostname}:{port}" if parsed.hostname else self.url

    def overview(self) -> dict[str, Any]:
        return dict(self.request("GET", "overview"))

    def feature_flags(self) -> dict[str, str]:
        """Feature flag name -> state (``enabled``, ``disabled``, ``state_changing``)."""
        return {flag["name"]: flag.get("state", "") for flag in self.request("GET", "feature-flags")}

    def exchanges(self, vhost: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"exchanges/{path_segment(vhost)}"))

    def queues(self, vhost: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"queues/{path_segment(vhost)}"))

    def bindings(self, vhost: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"bindings/{path_segment(vhost)}"))

    def policies(self, vhost: str) -> list[dict[str, Any]]:
        """``GET /api/policies/<vhost>``: name, pattern, apply-to, priority, definition of each policy."""
        return list(self.request("GET", f"policies/{path_segment(vhost)}"))

    def operator_policies(self, vhost: str) -> list[dict[str, Any]]:
        return list(self.request("GET", f"operator-policies/{path_segment(vhost)}"))

    def _found(self, path: str) -> Any:
        """``GET /api/<path>``'s body, or None when the API answers 404 (no such object)."""
        try:
            return self.request("GET", path)
        except ManagementError as error:
            if error.status == 404:
                return None
            raise

    def user(self, name: str) -> dict[str, Any] | None:
        """``GET /api/users/<name>``: ``name``, ``tags`` …; None when there is no such user."""
        found = self._found(f"users/{path_segment(name)}")
        return None if found is None else dict(found)

    def permissions(self, vhost: str, user: str) -> dict[str, Any] | None:
        """``GET /api/permissions/<vhost>/<user>``: ``configure``, ``write``, ``read``; None when the user has none
        there (or the user or vhost does not exist: ``rabbit_mgmt_wm_permission`` answers 404 for all three)."""
        found = self._found(f"permissions/{path_segment(vhost)}/{path_segment(user)}")
        return None if found is None else dict(found)

    def topic_permissions(self, vhost: str, user: str) -> list[dict[str, Any]]:
        """``GET /api/topic-permissions/<vhost>/<user>``: one ``exchange``, ``write``, ``read`` entry per exchange;
        [] when there is none (``rabbit_mgmt_wm_topic_permission`` answers 404 then, as for an unknown user)."""
        return list(self._found(f"topic-permissions/{path_segment(vhost)}/{path_segment(user)}") or [])

    def users(self) -> list[dict[str, Any]]:
        """``GET /api/users``: every user, each as ``GET /api/users/<name>`` shows it (``rabbit_mgmt_wm_users``
        ``users(all)`` formats each with ``rabbit_mgmt_format:internal_user/1``, as ``rabbit_mgmt_wm_user`` does)."""
        return list(self.request("GET", "users"))

    def vhost_permissions(self, vhost: str) -> list[dict[str, Any]]:
        """``GET /api/vhosts/<vhost>/permissions``: ``user``, ``configure``, ``write``, ``read`` of every user with
        permissions in the vhost (``rabbit_mgmt_wm_permissions_vhost``)."""
        return list(self.request("GET", f"vhosts/{path_segment(vhost)}/permissions"))

    def vhost_topic_permissions(self, vhost: str) -> list[dict[str, Any]]:
        """``GET /api/vhosts/<vhost>/topic-permissions``: ``user``, ``exchange``, ``write``, ``read`` of every topic
        permission in the vhost (``rabbit_mgmt_wm_topic_permissions_vhost``)."""
        return list(self.request("GET", f"vhosts/{path_segment(vhost)}/topic-permissions"))

    def vhost_exists(self, vhost: str) -> bool:
        return any(v["name"] == vhost for v in self.request("GET", "vhosts"))

    def definitions(self, vhost: str | None = None) -> dict[str, Any]:
        """``GET /api/definitions[/vhost]``: the export ``rabbitmqctl export_definitions`` would write."""
        return dict(self.request("GET", "definitions" + (f"/{path_segment(vhost)}" if vhost else "")))

    def vhost_definitions(self, vhost: str) -> dict[str, Any] | None:
        """``GET /api/definitions/<vhost>``, its ``rabbit_version`` the broker's; None when there is no such vhost
        (rabbitmq-server ``rabbit_mgmt_wm_definitions.erl`` ``to_json/2`` answers 400 ``vhost_not_found``, 3.10.8 to
        4.3.5): one read both asks whether the vhost exists and what it holds."""
        try:
            return self.definitions(vhost)
        except ManagementError as error:
            if error.status == 400 and "vhost_not_found" in str(error):
                return None
            raise

    def import_definitions(self, document: dict[str, Any]) -> None:
        """``POST /api/definitions``: note that conflicting queue arguments are kept silently by the broker."""
        self.request("POST", "definitions", document)

    def create_vhost(self, vhost: str, grant_to: str | None = None) -> None:
        """Create ``vhost`` and give ``grant_to`` (default: our user) full permissions on it."""
        self.request("PUT", f"vhosts/{path_segment(vhost)}", {})
        user = grant_to or self.username
        self.request(
            "PUT",
            f"permissions/{path_segment(vhost)}/{path_segment(user)}",
            {"configure": ".*", "write": ".*", "read": ".*"},
        )

    def delete_vhost(self, vhost: str) -> None:
        self.request("DELETE", f"vhosts/{path_segment(vhost)}")

    def delete_queue(self, vhost: str, queue: str) -> None:
        self.request("DELETE", f"queues/{path_segment(vhost)}/{path_segment(queue)}")

    def delete_binding(self, vhost: str, binding: dict[str, Any]) -> None:
        """Delete a binding as listed by ``bindings()`` (identified by its ``properties_key``)."""
        kind = "q" if binding["destination_type"] == "queue" else "e"
        path = (
            f"bindings/{path_segment(vhost)}/e/{path_segment(binding['source'])}/{kind}/"
            f"{path_segment(binding['destination'])}/{path_segment(binding['properties_key'])}"
        )
        self.request("DELETE", path)
