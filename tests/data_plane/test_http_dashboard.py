"""The ``/ui`` dashboard in a real headless browser (Debian chromium +
chromedriver through Selenium) against a running 3-node cluster: the leader
and ISR shown match ``raftlog topics describe``; after a broker is killed its
partitions turn under-replicated on the page. The screenshot goes to the
test's temporary directory; ``RAFTLOG_UPDATE_DOCS=1`` writes
``docs/dashboard.png`` instead (how the README's image is refreshed)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from data_plane.local_cluster import ClusterLayout, LocalCluster, Timeouts

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
DOCS_SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"


def _browser(profile_dir: Path) -> Any:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed (pip install selenium)")
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip("chromium/chromedriver not installed (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={profile_dir}",
                 "--window-size=1280,1000"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    layout = ClusterLayout.build(base_port=None, timeouts=Timeouts.fast())
    c = LocalCluster(tmp_path / "cluster", layout)
    c.up()
    try:
        yield c
    finally:
        c.stop()


def wait_for(what: str, predicate: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.25)


def describe(cluster: LocalCluster, topic: str) -> dict[int, tuple[int, set[int]]]:
    """partition -> (leader, ISR) as ``raftlog topics describe`` prints them."""
    out = subprocess.run(
        [sys.executable, "-m", "data_plane", "topics", "describe", "--topic", topic,
         "--bootstrap-server", cluster.bootstrap_servers],
        capture_output=True, text=True, check=True, timeout=30).stdout
    result = {}
    for m in re.finditer(r"Partition: (\d+)\tLeader: (\S+)\tReplicas: \S+\tIsr: (\S*)", out):
        result[int(m[1])] = (int(m[2]), {int(x) for x in m[3].split(",") if x})
    return result


def page_rows(browser: Any, topic: str) -> dict[int, dict[str, Any]]:
    rows = browser.execute_script("""
        return Array.from(document.querySelectorAll('#partitions tbody tr'))
          .filter(tr => tr.dataset.topic === arguments[0])
          .map(tr => ({partition: Number(tr.dataset.partition),
                       leader: tr.querySelector('.leader').textContent,
                       isr: tr.querySelector('.isr').textContent,
                       under: tr.classList.contains('under-replicated'),
                       offline: tr.classList.contains('offline')}));""", topic)
    return {r["partition"]: r for r in rows}


def test_dashboard_matches_describe_and_shows_under_replication(
        cluster: LocalCluster, tmp_path: Path) -> None:
    # The profile lives under tmp_path, so pytest removes it with the test's other files.
    browser = _browser(tmp_path / "chromium-profile")
    try:
        base = f"http://{cluster.layout.host}:{cluster.layout.node(1).http_port}"
        cluster_id = json.load(urllib.request.urlopen(base + "/healthz"))["cluster_id"]
        request = urllib.request.Request(
            f"{base}/v3/clusters/{cluster_id}/topics", method="POST",
            data=json.dumps({"topic_name": "dash", "partitions_count": 3,
                             "replication_factor": 3}).encode(),
            headers={"Content-Type": "application/json"})
        assert urllib.request.urlopen(request).status == 201
        cluster.wait_topic("dash", 3)
        for i in range(30):  # some traffic for the throughput panel
            urllib.request.urlopen(urllib.request.Request(
                f"{base}/v3/clusters/{cluster_id}/topics/dash/records", method="POST",
                data=json.dumps({"value": {"data": i}}).encode(),
                headers={"Content-Type": "application/json"}))

        browser.get(base + "/ui")
        assert wait_for("cluster id", lambda: browser.find_element(
            "id", "cluster-id").text == cluster_id)
        expected = describe(cluster, "dash")
        assert sorted(expected) == [0, 1, 2]

        def matches() -> bool:
            rows = page_rows(browser, "dash")
            return sorted(rows) == [0, 1, 2] and all(
                int(rows[p]["leader"]) == leader
                and {int(x) for x in rows[p]["isr"].split(",")} == isr
                and not rows[p]["under"]
                for p, (leader, isr) in expected.items())

        wait_for("leaders and ISRs as topics describe prints them", matches)
        assert browser.find_element("id", "quorum-leader").text in ("1", "2", "3")

        cluster.kill(3, signal.SIGKILL)
        # Fenced after broker.session.timeout.ms; the controller removes it from every ISR.
        wait_for("every dash partition under-replicated on the page", lambda: all(
            r["under"] and "3" not in r["isr"].split(",")
            for r in page_rows(browser, "dash").values()), timeout_s=60)
        after = describe(cluster, "dash")
        rows = page_rows(browser, "dash")
        for p, (leader, isr) in after.items():
            assert int(rows[p]["leader"]) == leader and 3 not in isr
        wait_for("broker 3 shown fenced", lambda: "fenced" in browser.execute_script(
            "return document.querySelector('#brokers tr[data-broker-id=\"3\"] .broker-state')"
            ".textContent"))
        time.sleep(2.5)  # one more refresh so the throughput cards have a rate
        screenshot = (DOCS_SCREENSHOT if os.environ.get("RAFTLOG_UPDATE_DOCS") == "1"
                      else Path(cluster.directory) / "dashboard.png")
        browser.save_screenshot(str(screenshot))
        assert screenshot.stat().st_size > 10_000
    finally:
        browser.quit()
