"""Take docs/gateway-page.png: the gateway's web page after translating a real text with the
shipped model, its alternatives and attention maps shown.

    .venv/bin/python scripts/screenshot_page.py                # packages/default, en -> de
    .venv/bin/python scripts/screenshot_page.py --out /tmp/page.png --text "Jesus wept."

Starts nmt-serve (the package, int8) and nmt-http on free localhost ports, drives headless
chromium (Debian: apt-get install chromium chromium-driver; pip install selenium) and stops
both servers whatever happens. Export the package first if it is missing:
``.venv/bin/nmt-export models/default packages/default --int8 --force``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

from cli import free_port

ROOT = Path(__file__).resolve().parents[1]
TEXT = "In the beginning God created the heaven and the earth. And God said, Let there be light."



@contextmanager
def process(args: list[str], name: str):
    """A subprocess, stopped (SIGTERM, then SIGKILL after 15 s) on the way out."""
    proc = subprocess.Popen(args, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        print(f"{name} stopped", file=sys.stderr)


def wait_ready(url: str, procs: list[subprocess.Popen], timeout: float) -> None:
    """Until the gateway's /readyz says the gRPC server is SERVING."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for p in procs:
            if p.poll() is not None:
                raise SystemExit(f"{p.args[2]} exited with status {p.returncode} before serving")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"the servers were not ready within {timeout:.0f} s")


def shoot(url: str, out: Path, text: str, source: str, target: str, width: int) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.support.ui import Select, WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--hide-scrollbars",
                f"--window-size={width},900", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver") or "chromedriver"))
    try:
        wait = WebDriverWait(browser, 60, poll_frequency=0.05)
        browser.get(url + "/")
        wait.until(lambda b: b.find_element("id", "translate").is_enabled())
        Select(browser.find_element("id", "source")).select_by_value(source)
        Select(browser.find_element("id", "target")).select_by_value(target)
        browser.find_element("id", "text").send_keys(text)
        for option in ("alternatives", "attention"):
            box = browser.find_element("id", option)
            if not box.is_selected():
                box.click()
        browser.find_element("id", "translate").click()
        wait.until(lambda b: b.find_element("id", "translation").text or b.find_element("id", "error").is_displayed())
        error = browser.find_element("id", "error")
        if error.is_displayed():
            raise SystemExit(f"the page shows an error: {error.text}")
        wait.until(lambda b: b.find_element("id", "translate").is_enabled())
        browser.execute_script("document.activeElement.blur();")
        height = browser.execute_script("return document.documentElement.scrollHeight")
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        out.parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(str(out))
        print(f"{out}: {width}x{height}, {out.stat().st_size // 1024} KiB; translation: "
              f"{browser.find_element('id', 'translation').text}")
    finally:
        browser.quit()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--package", default="packages/default", help="model package (default: packages/default)")
    p.add_argument("--out", default="docs/gateway-page.png", help="the PNG to write (default: docs/gateway-page.png)")
    p.add_argument("--text", default=TEXT, help="the text to translate")
    p.add_argument("--source", default="en")
    p.add_argument("--target", default="de")
    p.add_argument("--width", type=int, default=1280, help="window width in pixels (default: 1280)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the servers (default: 120)")
    args = p.parse_args(argv)
    package = ROOT / args.package
    if not (package / "model.json").is_file():
        raise SystemExit(f"{package} is not a model package; export it first: .venv/bin/nmt-export models/default "
                         f"{args.package} --int8 --force")
    grpc_port, http_port = free_port(), free_port()
    url = f"http://127.0.0.1:{http_port}"
    with ExitStack() as stack:
        server = stack.enter_context(process(
            [sys.executable, "-m", "server.main", "--model", f"default={package}", "--host", "127.0.0.1", "--port",
             str(grpc_port), "--metrics-port", "-1", "--int8", "--log-level", "WARNING"], "nmt-serve"))
        gateway = stack.enter_context(process(
            [sys.executable, "-m", "gateway.main", "--grpc-address", f"127.0.0.1:{grpc_port}", "--host", "127.0.0.1",
             "--port", str(http_port), "--log-level", "WARNING"], "nmt-http"))
        wait_ready(url, [server, gateway], args.timeout)
        shoot(url, ROOT / args.out, args.text, args.source, args.target, args.width)
    return 0


if __name__ == "__main__":
    sys.exit(main())
