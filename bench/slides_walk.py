"""Walk the whole lesson in presentation mode as a teacher would, in headless Chromium, and count what a class
at the back of the room would trip over.

From the start page with ``?present=true`` it presses Next until the lesson ends. On every slide it measures
every visible text element's computed size (HTML and the charts' SVG text; KaTeX keeps its own relative sizes and
counts by its base size), whether the page scrolls sideways, the height of the top row, and whether the slide's
content fits the viewport. Where a slide asks a question it checks that nothing answers it yet (no "This run:"
line), presses Reveal, and checks that the reveal drew the evidence (on the slide, or as the part's next slides)
and that the question and its answer are both on the screen without scrolling. It prints the counts per window
size, and the parts Next never reached.

    .venv/bin/python -m bench.slides_walk                    # starts its own server; 1280x720 and 1920x1080
    .venv/bin/python -m bench.slides_walk --url http://127.0.0.1:8501 --sizes 1280x720

``tests/browser/test_slides.py`` runs the same walk and asserts the counts are zero.
"""

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
TEXT_PX, HEADING_PX, CHROME_PX = 24, 36, 80  # slides.TEXT_PX, slides.HEADING_PX, the top row's most
MAX_SLIDES = 120
IDLE = ("() => !document.querySelector('[data-testid=\"stStatusWidget\"]') && document.querySelector("
        "'[data-testid=\"stApp\"]')?.dataset.testScriptState === 'notRunning'")  # the frontend's own run state
CHARTS_DRAWN = ("() => [...document.querySelectorAll('[data-testid=\"stPlotlyChart\"]')]"
                ".every(c => c.querySelector('.main-svg'))")

MEASURE = """([textPx, headingPx]) => {
  const H = innerHeight, W = innerWidth, small = [];
  const visible = r => r.width > 0 && r.height > 0 && r.bottom > 0 && r.top < H && r.right > 0 && r.left < W;
  let smallest = Infinity, count = 0;
  const elements = [];  // the page's, and those inside components' shadow roots (querySelectorAll stops at them)
  const walk = root => { for (const el of root.querySelectorAll('*')) { elements.push(el); if (el.shadowRoot) walk(el.shadowRoot); } };
  walk(document.body);
  for (const el of elements) {
    if (el.closest('[data-testid="stSidebar"][aria-expanded="false"], [data-testid="stHeader"], script, style'))
      continue;
    if (el.closest('.katex') && !el.classList.contains('katex')) continue;   // math keeps its relative sizes
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own && !el.classList.contains('katex')) continue;
    const r = el.getBoundingClientRect(), style = getComputedStyle(el);
    if (!visible(r) || style.visibility === 'hidden' || style.display === 'none' || +style.opacity === 0) continue;
    const size = parseFloat(style.fontSize), heading = el.closest('h1, h2, h3');
    count += 1; smallest = Math.min(smallest, size);
    if (size < (heading ? headingPx : textPx) - 0.5)
      small.push(`${Math.round(size)}px ${el.tagName.toLowerCase()}: ${el.textContent.trim().slice(0, 40)}`);
  }
  const chrome = [...document.querySelectorAll('[data-testid="stHorizontalBlock"]')]
    .find(b => b.textContent.includes('Present'));
  const shown = [...document.querySelectorAll('.st-key-slide [data-testid="stElementContainer"]')]
    .map(e => e.getBoundingClientRect()).filter(r => r.height > 0);
  const scroller = document.querySelector('[data-testid="stMain"]') || document.scrollingElement;
  return {count, smallest, small,
          chromeHeight: chrome ? chrome.getBoundingClientRect().height : null,
          sideways: Math.max(document.scrollingElement.scrollWidth, scroller.scrollWidth) > W + 1,
          bottom: shown.length ? Math.max(...shown.map(r => r.bottom)) : null, height: H};
}"""

SLIDE = """() => {
  const caption = [...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
    .map(c => c.textContent).find(t => /^part \\d+ of \\d+/.test(t)) || '';
  const heading = document.querySelector('[data-testid="stMain"] h3');
  const numbers = (caption.match(/\\d+/g) || []).map(Number);
  return {path: location.pathname, query: location.search, part: heading ? heading.textContent.trim() : '',
          k: numbers[0] || 0, n: numbers[1] || 0, sub: numbers.length > 2 ? numbers.slice(2) : [1, 1]};
}"""

QUESTION = """() => {
  const reveals = [...document.querySelectorAll('button')].filter(b => /(Reveal the answer|Show the answer)$/
    .test(b.textContent.trim()) && b.getBoundingClientRect().width > 0);
  const answered = [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
    .filter(m => m.textContent.startsWith('This run:'));
  const outside = [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stElementContainer"]')]
    .filter(e => !e.closest('[data-testid="stVerticalBlockBorderWrapper"]') && e.getBoundingClientRect().height > 0);
  const caption = [...document.querySelectorAll('[data-testid="stCaptionContainer"]')]
    .map(c => c.textContent).find(t => /^part \\d+ of \\d+/.test(t)) || '';
  return {open: reveals.length, slides: +(caption.match(/slide \\d+ of (\\d+)$/) || [0, 1])[1],
          bottom: reveals.length ? Math.max(...reveals.map(b => b.getBoundingClientRect().bottom)) : null,
          answered: answered.length, answerBottom: answered.length ? Math.max(...answered.map(
            a => a.getBoundingClientRect().bottom)) : null, evidence: outside.length, H: innerHeight};
}"""


@dataclass
class Slide:
    where: str                 # path?query · part · slide k of n
    part: str                  # path?query · part
    smallest: float
    small: list[str]
    sideways: bool
    chrome_px: float | None
    fits: bool                 # the slide's last element is on the first screen, before and after its reveal
    question: bool = False
    answered_early: bool = False   # a "This run:" line before the reveal
    evidence_withheld: bool = True  # the reveal drew elements outside the question boxes that were not there
    scroll_for_answer: bool = False  # the question's Reveal or its answer lies below the screen
    overflow_px: float = 0.0         # how far the slide's last element lies below the screen, at worst


@dataclass
class Walk:
    size: str
    slides: list[Slide] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)  # parts (stop · k/n) Next never showed

    def counts(self) -> dict[str, float | int]:
        s = self.slides
        return {"slides": len(s), "texts under size": sum(len(x.small) for x in s),
                "smallest font px": min((x.smallest for x in s), default=float("nan")),
                "questions": sum(x.question for x in s),
                "answered before reveal": sum(x.answered_early or (x.question and not x.evidence_withheld) for x in s),
                "scroll for question/answer": sum(x.scroll_for_answer for x in s),
                "slides that do not fit": sum(not x.fits for x in s), "sideways scroll": sum(x.sideways for x in s),
                "top row over 80 px": sum((x.chrome_px or 0) > CHROME_PX for x in s), "parts missed": len(self.missed)}


def settle(page) -> None:
    """Until the script run has finished (not running for half a second) and every chart has drawn."""
    quiet = 0
    for _ in range(600):
        time.sleep(0.25)
        quiet = quiet + 1 if page.evaluate(IDLE) else 0
        if quiet >= 2:
            break
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)


def _measure(page) -> dict:
    return page.evaluate(MEASURE, [TEXT_PX, HEADING_PX])


def walk(browser, url: str, width: int, height: int) -> Walk:
    """The whole lesson from the start page in presentation mode, in a fresh browser context."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.goto(f"{url}/?present=true")
    page.locator("h1").first.wait_for(timeout=120_000)
    settle(page)
    report, seen, parts = Walk(f"{width}x{height}"), set(), {}
    for _ in range(MAX_SLIDES):
        where = page.evaluate(SLIDE)
        stop = where["path"] + re.sub(r"[?&](part|present)=[^&]*", "", where["query"])
        name = f"{stop} · {where['part'][:40]} · slide {where['sub'][0]} of {where['sub'][1]}"
        if name in seen:
            break
        seen.add(name)
        print(f"  {width}x{height} {name}", flush=True)
        if where["n"]:
            parts.setdefault(stop, (where["n"], set()))[1].add(where["k"])
        first = _measure(page)
        question = page.evaluate(QUESTION)
        slide = Slide(name, f"{stop} · {where['part']}", first["smallest"], first["small"], first["sideways"],
                      first["chromeHeight"], first["bottom"] is None or first["bottom"] <= first["height"], bool(question["open"]),
                      overflow_px=max(0.0, (first["bottom"] or 0) - first["height"]))
        if question["open"]:
            slide.answered_early = question["answered"] > 0
            slide.scroll_for_answer = question["bottom"] > question["H"]
            for _ in range(question["open"]):  # every question on the slide: the evidence may answer several
                page.get_by_role("button", name=re.compile(r"(Reveal the answer|Show the answer)$")).first.click()
                settle(page)
            after, revealed = _measure(page), page.evaluate(QUESTION)
            # the reveal drew evidence: on this slide, or as the part's next slides
            slide.evidence_withheld = (revealed["evidence"] > question["evidence"]
                                       or revealed["slides"] > question["slides"])
            slide.scroll_for_answer |= (revealed["answerBottom"] or 0) > revealed["H"]
            slide.small += [text for text in after["small"] if text not in slide.small]
            slide.smallest = min(slide.smallest, after["smallest"])
            slide.fits &= after["bottom"] is None or after["bottom"] <= after["height"]
            slide.overflow_px = max(slide.overflow_px, (after["bottom"] or 0) - after["height"])
        report.slides.append(slide)
        forward = page.get_by_role("button", name="Next").or_(page.get_by_role("link", name="Next"))
        if forward.count() == 0 or forward.first.is_disabled():  # the lesson's end: a disabled button
            break
        forward.first.click()
        page.wait_for_function(f"() => JSON.stringify(({SLIDE})()) != {json.dumps(json.dumps(where))}",
                               timeout=120_000)
        settle(page)
    for k, slide in enumerate(report.slides):  # a part of two questions draws its evidence once both are revealed
        if slide.question and not slide.evidence_withheld:
            slide.evidence_withheld = any(later.part == slide.part and later.question and later.evidence_withheld
                                          for later in report.slides[k + 1:])
    report.missed = [f"{stop} · part {k} of {n}" for stop, (n, shown) in parts.items() for k in range(1, n + 1)
                     if k not in shown]
    context.close()
    return report


def serve(port: int) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port",
                                str(port), "--server.address", "127.0.0.1", "--server.headless", "true"], cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(120):
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read() == b"ok":
                return process
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit("the server did not start")


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running server; default: start one on --port")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--sizes", default="1280x720,1920x1080")
    parser.add_argument("--verbose", action="store_true", help="every slide's line, and each small text")
    args = parser.parse_args()
    server = None if args.url else serve(args.port)
    url = args.url or f"http://127.0.0.1:{args.port}"
    print(f"$ .venv/bin/python -m bench.slides_walk {' '.join(sys.argv[1:])}")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
            walks = [walk(browser, url, *map(int, size.split("x"))) for size in args.sizes.split(",")]
            browser.close()
    finally:
        if server:
            server.terminate()
    counts = [w.counts() for w in walks]
    print(f"{'':34}" + "".join(f"{w.size:>14}" for w in walks))
    for key in counts[0]:
        print(f"{key:34}" + "".join(f"{c[key]:>14.0f}" if isinstance(c[key], float) else f"{c[key]:>14}"
                                    for c in counts))
    for w in walks:
        for slide in w.slides:
            flags = [flag for flag, on in (("small text", slide.small), ("early answer", slide.answered_early),
                                           ("evidence not withheld", slide.question and not slide.evidence_withheld),
                                           ("scroll for answer", slide.scroll_for_answer),
                                           (f"does not fit by {slide.overflow_px:.0f} px", not slide.fits),
                                           ("sideways", slide.sideways)) if on]
            if flags or args.verbose:
                print(f"  {w.size} {slide.where}: {', '.join(flags) or 'ok'}"
                      + "".join(f"\n      {text}" for text in slide.small[: 8 if args.verbose else 3]))
        for missed in w.missed:
            print(f"  {w.size} missed: {missed}")


if __name__ == "__main__":
    main()
