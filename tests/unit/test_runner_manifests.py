"""The in-cluster runner (manifests/runner/) and its image, as a team would use them unchanged.

``kubectl apply -f manifests/runner/`` reads the directory's files in name order: everything a
namespaced object needs comes before it, and nothing starts a run. The nightly CronJob has
deadlines, requests and the arguments draconf really takes; the one-off Job is the same pod; the
volume option's patch points the CronJob's own volume at the claim it ships. The bed test
(tests/testbed/test_in_cluster.py) applies them with the real kubectl.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from draconf.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "manifests" / "runner"


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def applied_with_the_directory() -> list[dict]:
    """What ``kubectl apply -f manifests/runner/`` applies, in its order (not recursive)."""
    return [d for path in sorted(RUNNER.glob("*.yaml")) for d in docs(path)]


def cronjob() -> dict:
    (found,) = [d for d in applied_with_the_directory() if d["kind"] == "CronJob"]
    return found


def test_the_directory_applies_in_one_go_and_starts_nothing():
    applied = applied_with_the_directory()
    made: set[tuple[str, str]] = set()
    for doc in applied:
        namespace = doc["metadata"].get("namespace")
        if namespace:
            assert ("Namespace", namespace) in made, f"{doc['kind']} {doc['metadata']['name']} before its namespace"
        pod = doc.get("spec", {}).get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec", {})
        if pod.get("serviceAccountName"):
            assert ("ServiceAccount", pod["serviceAccountName"]) in made
        made.add((doc["kind"], doc["metadata"]["name"]))
    assert [d["kind"] for d in applied][:1] == ["Namespace"]
    assert not [d for d in applied if d["kind"] in ("Job", "Pod")], "applying the directory would start a run"


def test_the_cronjob_has_deadlines_and_a_hung_night_cannot_block_the_next():
    spec = cronjob()["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    assert 0 < spec["startingDeadlineSeconds"] <= 6 * 3600
    assert 0 < spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] < 24 * 3600  # before the next night


def test_the_runner_pods_request_resources_and_run_what_draconf_accepts():
    once = docs(RUNNER / "once" / "job.yaml")
    (job,) = once
    nightly = cronjob()["spec"]["jobTemplate"]["spec"]
    # The one-off Job is the nightly pod, run once.
    assert job["spec"]["template"] == nightly["template"]
    assert job["spec"]["activeDeadlineSeconds"] == nightly["activeDeadlineSeconds"]
    (container,) = nightly["template"]["spec"]["containers"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    args, rest = build_parser().parse_known_args(container["args"])
    assert not rest and args.target == "in-cluster" and args.html
    assert args.reports in [m["mountPath"] for m in container["volumeMounts"]]
    assert nightly["template"]["spec"]["securityContext"]["fsGroup"] == 65532  # a PV is writable


def test_the_volume_option_patches_the_cronjobs_reports_volume_onto_its_claim():
    (claim,) = docs(RUNNER / "volume" / "reports-pvc.yaml")
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["metadata"]["namespace"] == cronjob()["metadata"]["namespace"]
    (patch,) = docs(RUNNER / "volume" / "cronjob-patch.yaml")
    (volume,) = patch["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]
    pod = cronjob()["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert volume["name"] in [v["name"] for v in pod["volumes"]]
    assert volume["emptyDir"] is None  # a strategic merge patch's delete
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


def test_every_runner_file_the_docs_name_exists():
    texts = [REPO / "README.md", REPO / "Containerfile", *sorted((REPO / "docs").glob("*.md")),
             *sorted(RUNNER.rglob("*.yaml")), *sorted((REPO / "examples").rglob("*.yml")),
             *sorted((REPO / "tests" / "testbed").glob("test_in_cluster.py"))]
    named = {m for path in texts for m in re.findall(r"manifests/runner/[\w./-]*\.yaml", path.read_text())}
    assert named, "no runner file named anywhere?"
    assert sorted(n for n in named if not (REPO / n).is_file()) == []


def test_the_image_can_build_the_html_report():
    containerfile = (REPO / "Containerfile").read_text()
    base = re.search(r"^FROM \S*node:(\d+)", containerfile, re.MULTILINE)
    assert base and int(base.group(1)) >= 20, "Allure's dependencies need Node.js 20.19 or later"
    assert "ensure_allure_cli()" in containerfile  # installed at build time: no network in the pod


def test_run_html_that_cannot_be_built_is_one_line_and_changes_no_exit_code(tmp_path, capsys):
    from draconf.cli import _build_html
    (tmp_path / "allure-results").mkdir()  # no results in it: Allure is never reached
    _build_html(tmp_path)
    err = capsys.readouterr().err
    assert err.startswith("draconf: the HTML report was not built: ") and err.count("\n") == 1, err
