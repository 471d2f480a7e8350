"""What a draconf run leaves behind: ``summary.json``, a terminal matrix, and Allure extras.

One module per concern: :mod:`.diagnoses` (the vocabulary), :mod:`.recording` (what test code
records), :mod:`.verdict` (one verdict per test, in its stash), :mod:`.rows` (summary.json's rows), :mod:`.matrix` (the terminal matrix),
:mod:`.allure_extras` and :mod:`.junit` (what they add to Allure's and JUnit's files) and
:mod:`.plugin` (:class:`ReportingPlugin`, which writes them); this package re-exports their
public names.

The main plugin registers one :class:`ReportingPlugin` per pytest process and re-exports this
package's :func:`pytest_addoption`::

    from draconf.reporting import ReportingPlugin, pytest_addoption  # noqa: F401

    def pytest_configure(config):
        config.pluginmanager.register(ReportingPlugin(config), "draconf-reporting")

Tests say what they exercise with a marker, and explain a failure with a diagnosis code::

    @pytest.mark.draconf(workload="single-gpu", check="cdi")
    def test_container_sees_its_gpu(request, pod):
        if pod.visible_gpu != pod.allocated_gpu:
            record_diagnosis(request.node, "cdi-wrong-device",
                             evidence={"nvidia-smi -L": pod.nvidia_smi})
            pytest.fail(diagnosis_prefix("cdi-wrong-device") + "container sees the wrong GPU")

At the end of the session the plugin writes ``<--draconf-reports>/summary.json`` (one row per
test, see :class:`ReportingPlugin`), prints a workload x check matrix, and, when allure-pytest
is writing results (``--alluredir``), adds ``environment.properties`` and ``categories.json``
there so that Allure groups failures by diagnosis. :func:`build_html_report` turns such a
results directory into one self-contained HTML file with Allure 3 (Node, no Java).

Outcomes follow Allure's vocabulary, so the matrix, summary.json and the HTML report agree:

========  ==========================================================================
passed    every phase passed
failed    the test body raised AssertionError (or called ``pytest.fail``): the cluster
          does not conform
broken    the test body raised anything else: the test could not reach a verdict
error     setup or teardown (a fixture) failed
skipped   skipped or xfailed: the check does not apply to this cluster
========  ==========================================================================

and one of draconf's own, for a check that applies but was blocked:

==========  ========================================================================
no-verdict  the check raised :class:`draconf.errors.NoVerdict` (in setup or call): it
            could reach no verdict, and its message names the blocking cause (e.g.
            ``workload never started: ...``).  Never a pass.  pytest, JUnit and Allure
            see a skip, whose message starts with ``NoVerdict:``; summary.json and
            the matrix (``NO VERDICT``) name it.
==========  ========================================================================
"""


from __future__ import annotations

from draconf.reporting.allure_extras import (NO_VERDICT_CATEGORY, allure_categories, category_regex,
                                            environment_properties, write_allure_extras)
from draconf.reporting.diagnoses import DIAGNOSES, diagnosis_prefix, require_known_code
from draconf.reporting.junit import interruption_line, keep_final_attempts, mark_junit_interrupted
from draconf.reporting.matrix import (OUTCOME_COLOURS, OUTCOME_LABELS, cell_label, matrix_cells, matrix_lines,
                                      render_matrix)
from draconf.reporting.plugin import SUITE_DIR, SUMMARY_FILENAME, ReportingPlugin, pytest_addoption
from draconf.reporting.recording import (NAMESPACE_KEY, RUN_INFO_KEY, allure_is_recording, get_run_info, note, record_diagnosis,
                                         record_namespace, recorded_namespace, set_run_info,
                                         show_templated)
from draconf.reporting.rows import (OUTCOMES, count_outcomes, first_line, fold_phase, mark_reruns, marker_fields,
                                    new_row, phase_message, phase_outcome, worst_outcome)
from draconf.reporting.verdict import VERDICT_KEY, Verdict, verdict_of, with_code

__all__ = ["DIAGNOSES", "NAMESPACE_KEY", "NO_VERDICT_CATEGORY", "OUTCOMES", "OUTCOME_COLOURS", "OUTCOME_LABELS",
           "RUN_INFO_KEY", "SUITE_DIR", "SUMMARY_FILENAME", "ReportingPlugin", "VERDICT_KEY", "Verdict",
           "allure_categories", "allure_is_recording", "category_regex", "cell_label", "count_outcomes",
           "diagnosis_prefix", "environment_properties", "first_line", "fold_phase", "get_run_info",
           "interruption_line", "keep_final_attempts", "mark_junit_interrupted", "mark_reruns", "marker_fields", "matrix_cells",
           "matrix_lines", "new_row", "note", "phase_message", "phase_outcome", "pytest_addoption",
           "record_diagnosis", "record_namespace", "recorded_namespace", "render_matrix", "require_known_code",
           "set_run_info", "show_templated", "verdict_of", "with_code", "worst_outcome", "write_allure_extras"]
