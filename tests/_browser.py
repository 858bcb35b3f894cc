"""Headless Chromium (Debian's package) for the HTML report tests: layout checks via --dump-dom
and screenshots. ``python -m tests._browser`` regenerates the screenshots under docs/img.

Flags as this machine needs them (no sandbox as root, no background networking: the network is
closed), a fresh --user-data-dir per launch."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--allow-file-access-from-files"]

#: runs in a page that holds the reports in iframes; writes JSON into <pre id=result>
CHECK_JS = r"""
function check(doc) {
  const titles = [...doc.querySelectorAll('h1,h2,h3')].map(h => h.textContent.trim());
  const dup = titles.filter((t, i) => titles.indexOf(t) !== i);
  const wrapped = [];
  for (const td of doc.querySelectorAll('td,th')) {
    const t = td.textContent.trim();
    if (!/\d/.test(t) || td.classList.contains('text')) continue;
    const r = doc.createRange(); r.selectNodeContents(td);
    const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top)));
    if (tops.size > 1) wrapped.push(t);
  }
  const h1 = doc.querySelector('h1');
  const first = h1 && h1.nextElementSibling;
  return {titles, dup, wrapped,
          first_after_h1: first ? first.className : null,
          conclusion: doc.querySelector('p.conclusion') ?
                      doc.querySelector('p.conclusion').textContent : null,
          images: [...doc.images].map(i => [i.getAttribute('src'), i.naturalWidth]),
          overflow: doc.documentElement.scrollWidth > doc.defaultView.innerWidth + 1};
}
window.addEventListener('load', () => {
  const out = {};
  for (const f of document.querySelectorAll('iframe')) {
    try { out[f.id] = check(f.contentDocument); } catch (e) { out[f.id] = {error: String(e)}; }
  }
  const pre = document.createElement('pre'); pre.id = 'result';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
});
"""


def chromium() -> str | None:
    """The Chromium executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(args: list[str], timeout: float = 90.0) -> subprocess.CompletedProcess:
    exe = chromium()
    assert exe, "no chromium"
    with tempfile.TemporaryDirectory() as prof:
        return subprocess.run([exe, *FLAGS, f"--user-data-dir={prof}", *args],
                              capture_output=True, text=True, timeout=timeout)


def check_pages(pages: dict[str, Path], width: int = 1100, folder: Path | None = None) -> dict:
    """Load every page (in iframes ``width`` px wide) in one browser launch; per page: titles,
    duplicate titles, numeric cells that wrapped, the element after <h1>, the conclusion text,
    images and their natural widths (0 = failed to load), horizontal overflow."""
    folder = folder or Path(tempfile.mkdtemp())
    frames = "".join(f"<iframe id='{k}' src='{Path(p).resolve().as_uri()}' "
                     f"style='width:{width}px;height:1500px;border:0'></iframe>"
                     for k, p in pages.items())
    wrapper = folder / "check.html"
    wrapper.write_text(f"<!doctype html><html><body>{frames}<script>{CHECK_JS}</script>"
                       "</body></html>")
    res = _run(["--virtual-time-budget=10000", "--dump-dom", wrapper.as_uri()])
    m = re.search(r'<pre id="result">(.*?)</pre>', res.stdout, re.S)
    assert m, f"no result from chromium (rc {res.returncode}): {res.stderr[-2000:]}"
    import html

    return json.loads(html.unescape(m.group(1)))


def screenshot(page: Path, png: Path, width: int = 1100, height: int = 1400) -> Path:
    """A PNG of ``page`` at ``width`` x ``height`` px."""
    res = _run([f"--window-size={width},{height}", f"--screenshot={Path(png).resolve()}",
                Path(page).resolve().as_uri()])
    assert Path(png).exists(), f"no screenshot (rc {res.returncode}): {res.stderr[-2000:]}"
    return Path(png)


def _main() -> None:  # pragma: no cover - maintenance: refresh docs/img
    import sys

    from joulebound.cli import main

    out = Path("docs/img")
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp())
    assert main(["demo", "--report", str(tmp / "demo")]) == 0
    db = tmp / "runs.db"
    assert main(["measure", "--backend", "simulated", "--db", str(db), "--interval", "0.05",
                 "--", sys.executable, "-c", "import time; time.sleep(2)"]) == 0
    assert main(["report", str(db), "-o", str(tmp / "run")]) == 0
    res = check_pages({"demo": tmp / "demo" / "index.html", "run": tmp / "run" / "index.html"})
    for name, page in res.items():
        assert not (page["dup"] or page["wrapped"] or page["overflow"]), (name, page)
    screenshot(tmp / "demo" / "index.html", out / "report-demo.png", height=1600)
    screenshot(tmp / "run" / "index.html", out / "report-run.png", height=1400)
    print("wrote", out / "report-demo.png", out / "report-run.png")


if __name__ == "__main__":  # pragma: no cover
    _main()
