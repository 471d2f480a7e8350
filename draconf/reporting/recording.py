"""What test code records while it runs: a failure's diagnosis (:func:`record_diagnosis`), a
passing test's note (:func:`note`), the namespace its objects live in (:func:`record_namespace`)
and the run's metadata (:func:`set_run_info`), kept in pytest's stash until the reports are
written."""

from __future__ import annotations

import logging
from typing import Any, Mapping

import pytest

from draconf.reporting.diagnoses import require_known_code
from draconf.reporting.verdict import verdict_of

#: Run metadata collected by set_run_info(); lives on the config so any code can add to it.
RUN_INFO_KEY = pytest.StashKey[dict[str, Any]]()
#: The namespace a fixture made for the tests of its scope (see record_namespace()).
NAMESPACE_KEY = pytest.StashKey[str]()


def record_diagnosis(node: pytest.Item, code: str,
                     evidence: Mapping[str, Any] | None = None, reason: str | None = None) -> None:
    """Say why ``node`` (the test item: ``request.node``) is failing, with optional evidence.

    The code goes into the test's verdict (:mod:`draconf.reporting.verdict`), from which its
    summary.json row, its matrix cell and its failure's text take it. When Allure is recording,
    the test also gets the tag ``diagnosis:<code>`` and one text attachment per evidence entry,
    e.g. ``evidence={"kubectl describe pod": text}``. ``reason`` is the diagnosis sentence,
    naming the culprit (node, taint, class, device, permission): it goes into the summary.json
    row, the failure's ``draconf diagnosis`` section and the terminal's diagnoses list as well.
    A failure whose message lacks the :func:`diagnosis_prefix` gets it in what the reports say
    (row, crash line, Allure's message), never in the exception. Recording again replaces the
    code.
    """
    require_known_code(code)
    if not isinstance(node, pytest.Item):
        raise TypeError("record_diagnosis() needs the test item (request.node inside the test "
                        f"or a function-scoped fixture), not {type(node).__name__} {node.nodeid}")
    verdict_of(node).diagnose(code, reason)
    if allure_is_recording(node.config):
        import allure  # only here: reporting works without allure-pytest installed
        allure.dynamic.tag(f"diagnosis:{code}")
        for name, text in (evidence or {}).items():
            allure.attach(text if isinstance(text, str) else str(text), name=name,
                          attachment_type=allure.attachment_type.TEXT)


def record_namespace(request: pytest.FixtureRequest, name: str) -> None:
    """Say that the tests of ``request``'s scope keep their objects in namespace ``name``.

    Kept in the stash of the scope's node (the test item for a function-scoped fixture or a
    test's own ``request``, the class or module for a wider-scoped workload), until the
    fixture's scope ends; :func:`recorded_namespace` reads it for an item, and the diagnosis
    of a failure reads that namespace.  A pytest scope holds one instance of a fixture at a
    time (a class-scoped, parametrized workload is torn down before the next is made), so the
    record is always the namespace of the fixture the running test uses.
    """
    node = request.node
    node.stash[NAMESPACE_KEY] = name

    def forget() -> None:
        if node.stash.get(NAMESPACE_KEY, None) == name:
            del node.stash[NAMESPACE_KEY]
    request.addfinalizer(forget)


def recorded_namespace(item: pytest.Item) -> str | None:
    """The namespace of ``item``'s objects: the one recorded nearest to it (its own, then its
    class's, its module's), or None when no fixture of its made one.

    >>> class Node:
    ...     def __init__(self, chain=()): self.stash, self.chain = pytest.Stash(), [*chain, self]
    ...     def listchain(self): return self.chain
    >>> module = Node(); cls = Node([module]); item = Node([module, cls])
    >>> recorded_namespace(item) is None
    True
    >>> module.stash[NAMESPACE_KEY] = "draconf-job-1"
    >>> recorded_namespace(item)
    'draconf-job-1'
    >>> cls.stash[NAMESPACE_KEY] = "draconf-two-gpu-2"
    >>> recorded_namespace(item)
    'draconf-two-gpu-2'
    """
    for node in reversed(item.listchain()):
        name = node.stash.get(NAMESPACE_KEY, None)
        if name:
            return name
    return None


def note(item: pytest.Item, text: str, live: bool = True) -> None:
    """What a passing test found worth telling (a Kubernetes property it measured, the fallback
    a claim took): in the log, as a ``draconf-note`` JUnit property and as the Allure description.
    ``live=False`` keeps it out of the terminal (debug.log has it): a fleet sweep's thousand
    targets would print four lines of evidence each."""
    logging.getLogger("draconf").log(logging.WARNING if live else logging.DEBUG, text)
    item.user_properties.append(("draconf-note", text))
    if allure_is_recording(item.config):
        import allure
        allure.dynamic.description(text)


def show_templated(item: pytest.Item, lines: list[str]) -> None:
    """The fields the suite set in its manifests before applying them (docs/checks.md, "Templated
    fields"), with their values: in the log, as a ``draconf-templated`` JUnit property and an
    Allure attachment.  Nothing to show (applied as written) says so too."""
    text = "\n".join(lines) if lines else "applied as written"
    logging.getLogger("draconf").info("templated fields: %s", text)
    item.user_properties.append(("draconf-templated", text))
    if allure_is_recording(item.config):
        import allure
        allure.attach(text, name="templated fields", attachment_type=allure.attachment_type.TEXT)


def set_run_info(config: pytest.Config, **info: Any) -> None:
    """Add metadata about this run (target, versions, inventory...) to summary.json and Allure.

    >>> class FakeConfig: stash = pytest.Stash()
    >>> config = FakeConfig()
    >>> set_run_info(config, target="testbed", driver="gpu.nvidia.com")
    >>> set_run_info(config, run_id="abc123")
    >>> get_run_info(config)
    {'target': 'testbed', 'driver': 'gpu.nvidia.com', 'run_id': 'abc123'}
    """
    config.stash.setdefault(RUN_INFO_KEY, {}).update(info)


def get_run_info(config: pytest.Config) -> dict[str, Any]:
    """A copy of everything given to :func:`set_run_info` so far."""
    info = config.stash.get(RUN_INFO_KEY, None)
    return dict(info) if info else {}


def allure_is_recording(config: pytest.Config) -> bool:
    """True when this run was given ``--alluredir`` (allure-pytest is a dependency, so the
    option exists only where the plugin is loaded)."""
    return bool(getattr(config.option, "allure_report_dir", None))
