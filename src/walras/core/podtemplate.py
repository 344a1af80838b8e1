"""Shape checks of a FungibleJob's pod template: what the API server would reject in a Pod.

The CRD schema preserves unknown fields under ``template``, so a template whose
``resources.limits`` is a string, whose label value is 64 characters long or whose container is
named ``Train_1`` is accepted at admission and only fails when Walras creates the pod. Such a job
must fail alone (``Admitted=False`` naming the field), before it is planned, never inside the
round. The core cannot import the ``kubernetes`` package, so this module re-states the parts of
Kubernetes' Pod validation (``k8s.io/kubernetes/pkg/apis/core/validation``) that a template can
get wrong: the types of every field Walras or the API server reads, names (DNS-1123 labels),
label keys and values, quantities, tolerations and required node affinity.

:func:`check` returns the first :class:`Problem` (``field`` in the job's spec path, e.g.
``spec.template.spec.containers[1].resources.limits``) or None. Example::

    >>> check({"spec": {"containers": [{"name": "c", "image": "i", "resources": "4"}]}})
    Problem(field='spec.template.spec.containers[0].resources', reason='InvalidTemplate', ...)
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from walras.core.quantity import quantity

ROOT = "spec.template"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[a-zA-Z]{0,2})$")
_RESTART = frozenset({"Always", "OnFailure", "Never"})
_TOLERATION_OPS = frozenset({"", "Equal", "Exists"})
_EFFECTS = frozenset({"", "NoSchedule", "PreferNoSchedule", "NoExecute"})
_SELECTOR_OPS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
# Resources of the core API whose quantities may be fractional; every other one is "extended"
# (an integer, with requests equal to limits when both are given).
NATIVE = ("cpu", "memory", "ephemeral-storage")
# Annotations of one object may total at most 256 KiB (apimachinery's TotalAnnotationSizeLimitB).
_ANNOTATIONS_MAX = 256 * 1024


@dataclass(frozen=True, slots=True)
class Problem:
    """The first thing in a template that the API server would reject."""

    field: str
    reason: str
    message: str


class _BadError(Exception):
    def __init__(self, field: str, message: str, reason: str = "InvalidTemplate") -> None:
        super().__init__(message)
        self.problem = Problem(field, reason, message)


def is_native(resource: str) -> bool:
    """cpu, memory, ephemeral-storage and hugepages-*: fractional, not extended resources."""
    return resource in NATIVE or resource.startswith("hugepages-")


def label_value_ok(value: str) -> bool:
    """A valid label value: at most 63 characters, alphanumeric at both ends, ``-_.`` inside."""
    return len(value) <= 63 and _LABEL_VALUE.match(value) is not None


def _label_key_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and _LABEL_NAME.match(name) is not None


def _mapping(value: object, field: str, *, required: bool = False) -> Mapping[str, Any]:
    if value is None and not required:
        return {}
    if not isinstance(value, Mapping):
        raise _BadError(field, f"must be an object, got {type(value).__name__} {_short(value)}")
    return value


def _list(value: object, field: str) -> Sequence[Any]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _BadError(field, f"must be a list, got {type(value).__name__} {_short(value)}")
    return value


def _string(value: object, field: str, *, required: bool = False) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise _BadError(field, f"must be a string, got {type(value).__name__} {_short(value)}")
    return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def quantity_text(value: object, field: str) -> float:
    """A quantity as the API server reads it (string or number), >= 0; ``inf`` when it is
    well-formed but beyond float64."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _BadError(field, f"must be a quantity, got {_short(value)}", "InvalidQuantity")
    text = str(value).strip()
    if not _QUANTITY.match(text):
        raise _BadError(field, f"{_short(value)} is not a quantity", "InvalidQuantity")
    try:
        number = quantity(text)
    except ValueError:
        # The grammar holds but the value is beyond float64 (``1e400``): the API server stores
        # it, so it is no shape error; walras.core.model rejects it as a number out of range.
        return math.inf
    if number < 0:
        raise _BadError(field, f"{_short(value)} must be >= 0", "InvalidQuantity")
    return number


def _labels(value: object, field: str, *, annotations: bool = False) -> None:
    entries = _mapping(value, field)
    size = 0
    for key, item in entries.items():
        where = f"{field}[{key}]"
        if not isinstance(key, str) or not _label_key_ok(key):
            raise _BadError(where, f"{_short(key)} is not a valid label or annotation key")
        text = _string(item, where, required=True)
        size += len(key) + len(text)
        if not annotations and not label_value_ok(text):
            raise _BadError(
                where,
                f"{_short(text)} is not a valid label value (at most 63 characters, "
                "alphanumeric at both ends, '-', '_' or '.' inside)",
            )
    if annotations and size > _ANNOTATIONS_MAX:
        raise _BadError(field, f"annotations total {size} bytes, more than {_ANNOTATIONS_MAX}")


def _resources(value: object, field: str) -> None:
    res = _mapping(value, field)
    amounts: dict[str, dict[str, float]] = {}
    for part in ("limits", "requests"):
        entries = _mapping(res.get(part), f"{field}.{part}")
        amounts[part] = {}
        for name, amount in entries.items():
            where = f"{field}.{part}[{name}]"
            if not isinstance(name, str) or not _label_key_ok(name):
                raise _BadError(where, f"{_short(name)} is not a valid resource name")
            number = quantity_text(amount, where)
            if not is_native(name) and math.isfinite(number) and number != int(number):
                raise _BadError(
                    where, f"extended resource {name} must be a whole number", "InvalidQuantity"
                )
            amounts[part][name] = number
    for name, request in amounts["requests"].items():
        limit = amounts["limits"].get(name)
        if limit is None:
            if not is_native(name):
                raise _BadError(
                    f"{field}.limits[{name}]", f"extended resource {name} needs a limit"
                )
            continue
        if request > limit:
            raise _BadError(
                f"{field}.requests[{name}]", f"request {request:g} exceeds limit {limit:g}"
            )
        if not is_native(name) and request != limit:
            raise _BadError(
                f"{field}.requests[{name}]", f"extended resource {name}: request != limit"
            )


def _container(value: object, field: str, names: set[str]) -> None:
    c = _mapping(value, field, required=True)
    name = _string(c.get("name"), f"{field}.name", required=True)
    if len(name) > 63 or not _DNS_LABEL.match(name):
        raise _BadError(
            f"{field}.name", f"{_short(name)} is not a DNS-1123 label (lower case, digits, '-')"
        )
    if name in names:
        raise _BadError(f"{field}.name", f"duplicate container name {name!r}")
    names.add(name)
    # A missing image is left to the API server (and the CRD schema): the simulator's and the
    # unit tests' templates omit it, and it cannot make the round fail.
    _string(c.get("image"), f"{field}.image")
    for part in ("command", "args"):
        for k, item in enumerate(_list(c.get(part), f"{field}.{part}")):
            _string(item, f"{field}.{part}[{k}]", required=True)
    for k, env in enumerate(_list(c.get("env"), f"{field}.env")):
        entry = _mapping(env, f"{field}.env[{k}]", required=True)
        if not _string(entry.get("name"), f"{field}.env[{k}].name", required=True):
            raise _BadError(f"{field}.env[{k}].name", "an environment variable needs a name")
        _string(entry.get("value"), f"{field}.env[{k}].value")
    for k, port in enumerate(_list(c.get("ports"), f"{field}.ports")):
        entry = _mapping(port, f"{field}.ports[{k}]", required=True)
        number = entry.get("containerPort")
        if isinstance(number, bool) or not isinstance(number, int) or not 0 < number < 65536:
            raise _BadError(f"{field}.ports[{k}].containerPort", f"{_short(number)} is not a port")
    _resources(c.get("resources"), f"{field}.resources")
    restart = c.get("restartPolicy")
    if restart is not None and restart != "Always":
        raise _BadError(f"{field}.restartPolicy", "only 'Always' is allowed on a container")


def _tolerations(value: object, field: str) -> None:
    for k, item in enumerate(_list(value, field)):
        where = f"{field}[{k}]"
        t = _mapping(item, where, required=True)
        key = _string(t.get("key"), f"{where}.key")
        op = _string(t.get("operator"), f"{where}.operator")
        val = _string(t.get("value"), f"{where}.value")
        effect = _string(t.get("effect"), f"{where}.effect")
        if op not in _TOLERATION_OPS:
            raise _BadError(f"{where}.operator", f"{op!r} is not Equal or Exists")
        if effect not in _EFFECTS:
            raise _BadError(f"{where}.effect", f"{effect!r} is not a taint effect")
        if not key and op != "Exists":
            raise _BadError(f"{where}.operator", "an empty key needs operator Exists")
        if op == "Exists" and val:
            raise _BadError(f"{where}.value", "operator Exists takes no value")
        seconds = t.get("tolerationSeconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
            raise _BadError(f"{where}.tolerationSeconds", f"{_short(seconds)} is not an integer")


def _requirements(value: object, field: str, *, fields: bool = False) -> None:
    for k, item in enumerate(_list(value, field)):
        where = f"{field}[{k}]"
        r = _mapping(item, where, required=True)
        key = _string(r.get("key"), f"{where}.key", required=True)
        op = _string(r.get("operator"), f"{where}.operator", required=True)
        values = [
            _string(v, f"{where}.values[{n}]", required=True)
            for n, v in enumerate(_list(r.get("values"), f"{where}.values"))
        ]
        if fields and key != "metadata.name":
            raise _BadError(f"{where}.key", "matchFields supports only metadata.name")
        if not fields and not _label_key_ok(key):
            raise _BadError(f"{where}.key", f"{key!r} is not a valid label key")
        if op not in _SELECTOR_OPS or (fields and op not in ("In", "NotIn")):
            raise _BadError(f"{where}.operator", f"{op!r} is not a node selector operator")
        if op in ("In", "NotIn") and not values:
            raise _BadError(f"{where}.values", f"operator {op} needs values")
        if op in ("Exists", "DoesNotExist") and values:
            raise _BadError(f"{where}.values", f"operator {op} takes no values")
        # The API server stores a non-integer Gt/Lt value; such a term matches no node
        # (walras.core.filters.requirement_matches), as in kube-scheduler.
        if op in ("Gt", "Lt") and len(values) != 1:
            raise _BadError(f"{where}.values", f"operator {op} needs exactly one value")


def _affinity(value: object, field: str) -> None:
    aff = _mapping(value, field)
    node = _mapping(aff.get("nodeAffinity"), f"{field}.nodeAffinity")
    req_field = f"{field}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = _mapping(node.get("requiredDuringSchedulingIgnoredDuringExecution"), req_field)
    if not required:
        return
    terms = _list(required.get("nodeSelectorTerms"), f"{req_field}.nodeSelectorTerms")
    if not terms:
        raise _BadError(f"{req_field}.nodeSelectorTerms", "must have at least one term")
    for k, term in enumerate(terms):
        where = f"{req_field}.nodeSelectorTerms[{k}]"
        t = _mapping(term, where, required=True)
        _requirements(t.get("matchExpressions"), f"{where}.matchExpressions")
        _requirements(t.get("matchFields"), f"{where}.matchFields", fields=True)


def _pod_spec(value: object, field: str) -> None:
    spec = _mapping(value, field, required=True)
    names: set[str] = set()
    containers = _list(spec.get("containers"), f"{field}.containers")
    if not containers:
        raise _BadError(f"{field}.containers", "no containers")
    for k, c in enumerate(containers):
        _container(c, f"{field}.containers[{k}]", names)
    for k, c in enumerate(_list(spec.get("initContainers"), f"{field}.initContainers")):
        _container(c, f"{field}.initContainers[{k}]", names)
    restart = _string(spec.get("restartPolicy"), f"{field}.restartPolicy")
    if restart and restart not in _RESTART:
        raise _BadError(f"{field}.restartPolicy", f"{restart!r} is not Always, OnFailure or Never")
    selector = _mapping(spec.get("nodeSelector"), f"{field}.nodeSelector")
    for key, item in selector.items():
        where = f"{field}.nodeSelector[{key}]"
        if not isinstance(key, str) or not _label_key_ok(key):
            raise _BadError(where, f"{_short(key)} is not a valid label key")
        if not label_value_ok(_string(item, where, required=True)):
            raise _BadError(where, f"{_short(item)} is not a valid label value")
    _tolerations(spec.get("tolerations"), f"{field}.tolerations")
    _affinity(spec.get("affinity"), f"{field}.affinity")
    account = _string(spec.get("serviceAccountName"), f"{field}.serviceAccountName")
    if account and (len(account) > 253 or not _DNS_SUBDOMAIN.match(account)):
        raise _BadError(f"{field}.serviceAccountName", f"{account!r} is not a DNS-1123 subdomain")
    for key in ("schedulerName", "priorityClassName", "nodeName", "hostname", "subdomain"):
        _string(spec.get(key), f"{field}.{key}")
    for k, vol in enumerate(_list(spec.get("volumes"), f"{field}.volumes")):
        entry = _mapping(vol, f"{field}.volumes[{k}]", required=True)
        vname = _string(entry.get("name"), f"{field}.volumes[{k}].name", required=True)
        if len(vname) > 63 or not _DNS_LABEL.match(vname):
            raise _BadError(f"{field}.volumes[{k}].name", f"{vname!r} is not a DNS-1123 label")
    _mapping(spec.get("overhead"), f"{field}.overhead")
    for name, amount in _mapping(spec.get("overhead"), f"{field}.overhead").items():
        quantity_text(amount, f"{field}.overhead[{name}]")
    for key in ("hostNetwork", "automountServiceAccountToken"):
        item = spec.get(key)
        if item is not None and not isinstance(item, bool):
            raise _BadError(f"{field}.{key}", f"must be true or false, got {_short(item)}")


def check(template: object) -> Problem | None:
    """The first problem of a pod template (None when the API server would accept its pods)."""
    try:
        t = _mapping(template, ROOT, required=True)
        meta = _mapping(t.get("metadata"), f"{ROOT}.metadata")
        _labels(meta.get("labels"), f"{ROOT}.metadata.labels")
        _labels(meta.get("annotations"), f"{ROOT}.metadata.annotations", annotations=True)
        _pod_spec(t.get("spec"), f"{ROOT}.spec")
    except _BadError as bad:
        return bad.problem
    return None
