"""spillstore's metrics in the live Spark UI, checked in a real browser (headless Chromium
driven by Selenium): the SQL tab's plan of a streaming batch shows the cache hit ratio as
avg (min, med, max) on the stateful operator, and the Structured Streaming tab charts the
metrics ``spillstore.configure`` enables there.

The query runs in its own process (``ui_worker.py``): the tests' shared session has the UI
off. Screenshots go to pytest's temp dir, or to ``$SPILLSTORE_SCREENSHOTS`` when set
(``docs/ui-sql-tab.png`` and ``docs/ui-streaming-tab.png`` were made that way).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import harness
import pytest
import spillstore

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
HERE = Path(__file__).resolve().parent
WAIT_S = 30
# what the SQL tab calls spillstore's metrics (their descriptions in SpillStoreMetrics.scala)
RATIO_LABEL = "spillstore: cache hit ratio (%)"
OTHER_LABELS = (
    "spillstore: lookups answered from the heap",
    "spillstore: lookups that had to read the cold tier",
    "spillstore: entries evicted from the heap to the cold tier",
    "spillstore: estimated heap bytes of live state",
)


def _install_chromium() -> None:
    """Debian's chromium and chromium-driver, through apt (the tests run as root in CI)."""
    if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists():
        return
    if os.geteuid() != 0:
        pytest.fail(f"{CHROMIUM} or {CHROMEDRIVER} is missing and the tests do not run as root "
                    "to install them: run `apt-get install -y chromium chromium-driver`")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for command in (["apt-get", "update"],
                    ["apt-get", "install", "-y", "chromium", "chromium-driver"]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            pytest.fail(f"installing Chromium for the browser test failed: `{' '.join(command)}` "
                        f"exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.fail(f"apt-get installed chromium, but {CHROMIUM} or {CHROMEDRIVER} is missing")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium session (installed first if missing)."""
    _install_chromium()
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.fail("selenium is missing: pip install -r python/requirements-dev.txt")
    profile = tempfile.mkdtemp(prefix="spillstore-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    # an explicit driver path: Selenium Manager never looks for (or downloads) one
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def live_query(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``ui_worker.py`` running a spillstore query with the UI on: its UI address, app id and
    the query's run id."""
    workdir = tmp_path_factory.mktemp("ui")
    env = {**os.environ, **harness.jvm_tmp_env(workdir), "PYTHONPATH": os.pathsep.join(
        [str(Path(spillstore.__file__).parent.parent), str(HERE)])}
    log = open(workdir / "worker.log", "w")
    worker = subprocess.Popen(
        [sys.executable, str(harness.JOBS / "ui_worker.py"), str(_free_port()),
         str(workdir / "checkpoint")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        assert worker.stdout is not None
        line = worker.stdout.readline()  # the worker gives up after 90 s without batches
        if not line:
            worker.wait(timeout=30)
            pytest.fail(f"ui_worker.py exited {worker.returncode} before the query was ready:\n"
                        + (workdir / "worker.log").read_text()[-4000:])
        yield json.loads(line)
    finally:
        assert worker.stdin is not None
        worker.stdin.close()  # stops the query and the session
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        log.close()


def _screenshot_dir(tmp_path: Path) -> Path:
    target = Path(os.environ.get("SPILLSTORE_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    return target


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=WAIT_S) as response:
        return json.load(response)


def _wait(browser: Any, condition: Any, what: str) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(browser, WAIT_S).until(condition)
    except TimeoutException:
        pytest.fail(f"timed out after {WAIT_S} s waiting for {what} on {browser.current_url}:\n"
                    + browser.find_element("tag name", "body").text[:3000])


def _batch_execution_with_ratio_spread(live_query: dict[str, str]) -> int:
    """The SQL execution id of the newest completed micro-batch of the query whose hit ratio
    Spark renders as min, med, max: one where at least two tasks had hits (Spark shows a single
    positive task value alone, and leaves out tasks at 0 %)."""
    url = f"{live_query['ui']}/api/v1/applications/{live_query['app_id']}/sql?length=10000"
    executions = sorted(
        (e for e in _get_json(url + "&details=true&planDescription=false")
         if e["status"] == "COMPLETED" and f"runId = {live_query['run_id']}" in e["description"]
         and "batch = " in e["description"]),
        key=lambda e: -int(e["id"]))
    assert executions, "no completed micro-batch in the SQL tab"
    for e in executions:
        values = [m["value"] for node in e.get("nodes", []) for m in node.get("metrics", [])
                  if m["name"] == RATIO_LABEL]
        if any(v.startswith("(min, med, max") for v in values):
            return int(e["id"])
    raise AssertionError(f"no batch of {len(executions)} shows the ratio as min, med, max")


def test_sql_tab_shows_cache_hit_ratio(
    browser: Any, live_query: dict[str, str], tmp_path: Path
) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    execution = _batch_execution_with_ratio_spread(live_query)
    browser.get(f"{live_query['ui']}/SQL/execution/?id={execution}")
    # the plan graph is drawn by the page's scripts from the plan's metadata
    _wait(browser, lambda b: b.find_elements(By.CSS_SELECTOR, "#plan-viz-graph svg g.node"),
          "the plan graph")
    save = _wait(browser, lambda b: [n for n in b.find_elements(
        By.CSS_SELECTOR, "#plan-viz-graph svg g.node") if "StateStoreSave" in n.text],
        "the StateStoreSave node")[0]
    # the page's plan metadata holds each metric's text as Spark renders it
    details = json.loads(browser.execute_script(
        "return document.querySelector('#plan-viz-metadata .node-details').textContent"))
    metrics = {m["name"]: m for node in details.values() if node.get("name") == "StateStoreSave"
               for m in node.get("metrics", [])}
    ratio = metrics.get(RATIO_LABEL)
    assert ratio is not None, sorted(metrics)
    assert ratio["type"] == "average", ratio
    # Spark 4.3 renders an average metric as min, med, max over the tasks (no "avg" figure):
    # "(min, med, max (stageId: taskId)):\n(19.1, 61.8, 61.8 (stage 15.0: task 29))"
    assert re.fullmatch(r"\(min, med, max \(stageId: taskId\)\):\n"
                        r"\([0-9.]+, [0-9.]+, [0-9.]+ \(stage [0-9.]+: task [0-9]+\)\)",
                        ratio["value"]), ratio
    for name in OTHER_LABELS:
        assert name in metrics, sorted(metrics)

    # clicking the node shows its metrics in the side panel: the ratio as min / med / max
    save.click()
    _wait(browser, lambda b: RATIO_LABEL in b.find_element(By.ID, "plan-viz-details-body").text,
          "the StateStoreSave details")
    assert browser.find_element(By.ID, "plan-viz-details-title").text == "StateStoreSave"
    row = browser.find_element(By.XPATH, "//*[@id='plan-viz-details-body']//tr"
                               f"[td[1][normalize-space()='{RATIO_LABEL}']]")
    headers = [th.text for th in row.find_elements(By.CSS_SELECTOR, "td table th")]
    assert headers[:3] == ["Min", "Med", "Max"], headers
    values = [float(td.text) for td in row.find_elements(By.CSS_SELECTOR, "td table td")[:3]]
    assert all(0 <= v <= 100 for v in values) and values == sorted(values), values
    assert values[-1] > 0, values  # the hot keys stay on the heap: some lookups hit

    # for the screenshot: only the ratio in the panel (long names push values out of view),
    # and the pointer off the node so its tooltip does not cover the graph
    search = browser.find_elements(By.ID, "metric-search")
    if search:
        search[0].send_keys("hit ratio")
    ActionChains(browser).move_to_element(
        browser.find_element(By.ID, "plan-viz-details-title")).perform()
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});",
                           browser.find_element(By.ID, "plan-viz-graph"))
    time.sleep(0.5)
    shot = _screenshot_dir(tmp_path) / "ui-sql-tab.png"
    assert browser.save_screenshot(str(shot)), "no screenshot"
    assert shot.stat().st_size > 10_000


def test_streaming_tab_charts_spillstore_metrics(
    browser: Any, live_query: dict[str, str], tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{live_query['ui']}/StreamingQuery/")
    _wait(browser, lambda b: live_query["run_id"] in b.page_source, "the query in the list")
    browser.get(f"{live_query['ui']}/StreamingQuery/statistics/?id={live_query['run_id']}")
    page = _wait(browser, lambda b: b.find_element(By.TAG_NAME, "body").text, "the page")
    assert live_query["name"] in page
    for metric in spillstore.UI_CUSTOM_METRICS:
        assert f"Aggregated Custom Metric {metric}" in page, page[:3000]
        # the timeline and the histogram are drawn (d3) as SVG into their cells
        for kind in ("timeline", "histogram"):
            _wait(browser, lambda b, m=metric, k=kind: b.find_elements(
                By.CSS_SELECTOR, f"td.aggregated-{m}-{k} svg path"), f"the {metric} {kind}")
    assert "Aggregated Custom Metric spillstoreCacheHitPermille" not in page  # not enabled
    row = browser.find_element(
        By.XPATH, "//td[contains(@class, 'aggregated-spillstoreCacheHits-timeline')]/..")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", row)
    time.sleep(0.5)  # let the page settle after scrolling
    shot = _screenshot_dir(tmp_path) / "ui-streaming-tab.png"
    assert browser.save_screenshot(str(shot)), "no screenshot"
    assert shot.stat().st_size > 10_000
