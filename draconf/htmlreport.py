"""A single-file HTML report from Allure results, built with Allure 3 (Node only, no Java).

``draconf report`` calls :func:`build_html_report`; the report groups failures by diagnosis
(the categories :func:`draconf.reporting.allure_categories` writes) and shows the run info.

Allure is pinned: ``draconf/allure/package.json`` names one exact version and
``package-lock.json`` every package under it (with its integrity hash); ``npm ci`` installs
exactly that, once, into a cache directory named by the lockfile's hash.  After that a report
builds with no network, and opening it makes no request beyond the file itself: Allure 3's
generators always add Google Analytics (no option turns it off in the pinned release), so the
build strips it and then refuses a report that still loads anything from a host
(:func:`external_references`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

from draconf.errors import DraconfError
from draconf.reporting.allure_extras import allure_categories
from draconf.cachedir import cache_root

# package.json (allure, one exact version) and package-lock.json: what `npm ci` installs.
ALLURE_PACKAGE_DIR = Path(__file__).resolve().parent / "allure"
ALLURE_VERSION = json.loads((ALLURE_PACKAGE_DIR / "package.json").read_text())["dependencies"]["allure"]
ALLURE_NPM_PACKAGE = f"allure@{ALLURE_VERSION}"


def build_html_report(results_dir: str | os.PathLike, output_dir: str | os.PathLike,
                      log: Callable[[str], None] = print,
                      history_file: str | os.PathLike | None = None) -> Path:
    """Turn an Allure results dir into one self-contained HTML file; returns its path.

    Uses the npm package ``allure`` (version 3, Node only), installed on first use under
    ``<cache_root()>/node``. The report groups failures by diagnosis (:func:`allure_categories`)
    and shows the run info from ``environment.properties``. Example::

        html = build_html_report("reports/allure-results", "reports/html")
        # -> reports/html/index.html

    With ``history_file`` (Allure 3's JSONL history), this run is appended to it and the
    report shows the runs before it: trends and each test's history.

    Raises DraconfError when node or npm is missing, the results dir holds no results, or
    Allure fails.
    """
    results_dir, output_dir = Path(results_dir).resolve(), Path(output_dir).resolve()
    _require_allure_results(results_dir)
    allure_cli = ensure_allure_cli(log)
    output_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="draconf-allure-") as workdir:
        config_path = Path(workdir) / "allurerc.json"
        config = allure_config()
        if history_file is not None:
            config.update(historyPath=str(Path(history_file).resolve()), appendHistory=True)
        config_path.write_text(json.dumps(config), encoding="utf-8")
        command = [str(allure_cli), "generate", str(results_dir),
                   "--output", str(output_dir), "--config", str(config_path)]
        log(f"building HTML report from {results_dir}")
        # cwd is the temp dir so that no allurerc.* lying around the user's cwd is picked up.
        # ALLURE_NO_ANALYTICS=true: Allure's own opt-out; its allure2 plugin honours it, the
        # awesome plugin of the pinned release does not (allure3 issue #476), hence the strip.
        _run(command, cwd=workdir, what="Allure could not build the HTML report", timeout=600,
             env={"ALLURE_NO_ANALYTICS": "true"})
    html = output_dir / "index.html"
    if not html.is_file():
        raise DraconfError(f"Allure finished but wrote no {html}; see its output above")
    text = strip_analytics(html.read_text(encoding="utf-8"))
    html.write_text(text, encoding="utf-8")
    external = external_references(text)
    if external:
        raise DraconfError(f"the HTML report {html} would load {', '.join(external)} when opened; "
                           f"an Allure other than {ALLURE_NPM_PACKAGE} (draconf/allure/) may have built it")
    log(f"HTML report: {html}")
    return html


# Allure 3's generators (awesome, classic, dashboard; allure 3.18.0) end the page with Google
# Tag Manager's loader and an inline gtag() block, unconditionally: `analyticsEnable: true` is
# hard-coded, no allurerc option or environment variable reaches it (allure3 issue #476, PR
# #784 open).  A report opened inside a bank's or a lab's network must not call out, so the
# build removes both: the <script src> to googletagmanager.com and the inline script that
# defines gtag() and dataLayer.  Nothing else in the page refers to either.
_ANALYTICS = re.compile(
    r"""\s*<script\b[^>]*\bsrc=["']?https?://[^"'\s>]*googletagmanager\.com/[^>]*>\s*</script>"""
    r"""|\s*<script>(?:(?!</script>).)*?\bgtag\((?:(?!</script>).)*?</script>""",
    re.DOTALL)


def strip_analytics(html: str) -> str:
    """``html`` without Google Analytics' loader and its inline gtag() set-up.

    >>> strip_analytics('<body><script async src="https://www.googletagmanager.com/gtag/js?id=G-1"></script>'
    ...                 '<script>window.dataLayer = []; function gtag(){dataLayer.push(arguments);}</script>'
    ...                 '<script>d("data/x.json","e30=")</script></body>')
    '<body><script>d("data/x.json","e30=")</script></body>'
    """
    return _ANALYTICS.sub("", html)


# What makes a browser fetch something while the page loads: a script, stylesheet, icon,
# font, image or frame from a URL, or a CSS url().  A plain link (<a href>) is only followed
# when clicked, and xmlns="http://www.w3.org/..." names a namespace, fetches nothing.
_FETCHING_ATTRIBUTE = re.compile(
    r"""<(?:script|link|img|iframe|frame|source|audio|video|embed|track|input|object)\b[^>]*?"""
    r"""\s(?:src|href|data|poster|srcset)\s*=\s*["']?\s*((?:https?:)?//[^"'\s>]+)""", re.IGNORECASE)
_CSS_URL = re.compile(r"""url\(\s*["']?((?:https?:)?//[^"')\s]+)""", re.IGNORECASE)
_ANALYTICS_HOSTS = re.compile(r"(?:https?:)?//[^\s\"'/]*(?:googletagmanager\.com|google-analytics\.com)[^\s\"'<>]*")


def external_references(html: str) -> list[str]:
    """The URLs on a host that the page loads when opened (none for a report fit to open offline).

    Read statically from the HTML outside its data: URIs (Allure inlines its app as one):
    what a tag loads (script, link, img, iframe, ...), CSS url(), and any reference to Google
    Analytics' hosts.  The browser check (tests/report/test_html_offline.py) is the proof.

    >>> external_references('<link rel="icon" href="data:image/svg+xml,%3Csvg xmlns=%27http://www.w3.org/2000/svg%27%3E">'
    ...                     '<a href="https://allurereport.org">Allure</a><script src="data:text/javascript;base64,AA=="></script>')
    []
    >>> external_references('<script async src="https://www.googletagmanager.com/gtag/js?id=G-1"></script>'
    ...                     '<link rel="stylesheet" href="//fonts.example.com/a.css"><div style="background:url(http://x.test/a.png)">')
    ['https://www.googletagmanager.com/gtag/js?id=G-1', '//fonts.example.com/a.css', 'http://x.test/a.png']
    """
    text = re.sub(r"data:[\w.+/-]+(?:;[\w=.+-]+)*,[^\"'\s>)]*", "data:", html)
    found: list[str] = []
    for pattern in (_FETCHING_ATTRIBUTE, _CSS_URL, _ANALYTICS_HOSTS):
        for match in pattern.finditer(text):
            url = match.group(match.lastindex or 0)
            if url not in found:
                found.append(url)
    return found


def allure_config() -> dict[str, Any]:
    """The Allure 3 config: the Awesome report as one file, failures grouped by diagnosis."""
    return {"name": "draconf conformance",
            "plugins": {"awesome": {"options": {"singleFile": True,
                                                "reportName": "draconf conformance"}}},
            "categories": allure_categories()}


def allure_node_dir() -> Path:
    """Where ``npm ci`` installs the pinned Allure: ``~/.cache/draconf/node/allure-<version>-<lock>``.

    (or under ``$DRACONF_CACHE_DIR``); ``<lock>`` is the lockfile's hash, so a changed lock
    installs afresh and never mixes with an older tree.
    """
    lock = hashlib.sha256((ALLURE_PACKAGE_DIR / "package-lock.json").read_bytes()).hexdigest()[:12]
    return cache_root() / "node" / f"allure-{ALLURE_VERSION}-{lock}"


def ensure_allure_cli(log: Callable[[str], None] = print) -> Path:
    """Path of the pinned ``allure`` CLI, installed with ``npm ci`` from the lockfile on first use.

    Once installed only ``node`` is needed (no npm, no network). The install goes to a
    temporary directory beside the final one and is renamed into place when complete, so an
    interrupted install is never taken for a finished one.
    """
    if shutil.which("node") is None:
        raise DraconfError("node is not installed; the HTML report needs Node.js 20.19 or later "
                           "(and npm for the first use), e.g. `apt-get install nodejs npm`")
    prefix = allure_node_dir()
    cli = prefix / "node_modules" / ".bin" / "allure"
    if cli.exists():
        return cli
    if shutil.which("npm") is None:
        raise DraconfError(f"npm is not installed; the HTML report's first use installs "
                           f"{ALLURE_NPM_PACKAGE} with it into {prefix} (e.g. `apt-get install npm`)")
    log(f"installing {ALLURE_NPM_PACKAGE} with `npm ci` from draconf/allure/package-lock.json "
        f"into {prefix} (first use only)")
    prefix.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{prefix.name}-", dir=prefix.parent))
    try:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(ALLURE_PACKAGE_DIR / name, staging / name)
        _run(["npm", "ci", "--no-audit", "--no-fund"], cwd=staging,
             what=f"npm could not install {ALLURE_NPM_PACKAGE} from the lockfile", timeout=900)
        if not (staging / "node_modules" / ".bin" / "allure").exists():
            raise DraconfError(f"npm installed {ALLURE_NPM_PACKAGE} but its `allure` command is missing")
        try:
            staging.rename(prefix)
        except OSError:
            if not cli.exists():  # not another draconf that finished first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return cli


def _require_allure_results(results_dir: Path) -> None:
    if not results_dir.is_dir():
        raise DraconfError(f"no Allure results directory at {results_dir}; run pytest with "
                           f"--alluredir {results_dir} first")
    if not any(results_dir.glob("*-result.json")):
        raise DraconfError(f"{results_dir} holds no Allure test results (*-result.json); "
                           f"run pytest with --alluredir {results_dir} first")


def _run(command: list[str], cwd: str | os.PathLike, what: str, timeout: float,
         env: dict[str, str] | None = None) -> str:
    """Run ``command``; on failure raise DraconfError(``what``) with the tail of its output."""
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout, env={**os.environ, "NO_COLOR": "1", **(env or {})})
    except subprocess.TimeoutExpired as err:
        raise DraconfError(f"{what}: `{' '.join(command)}` took longer than {timeout:.0f}s\n"
                           f"{_tail(_text(err.stdout) + _text(err.stderr))}") from None
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise DraconfError(f"{what}: `{' '.join(command)}` exited with {done.returncode}\n"
                           f"{_tail(output)}")
    return output


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _tail(output: str, lines: int = 20) -> str:
    """The last ``lines`` lines of ``output``, indented to set them apart from our message."""
    return "\n".join("    " + line for line in output.strip().splitlines()[-lines:])
