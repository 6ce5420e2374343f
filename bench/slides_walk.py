"""Walk the whole lesson in presentation mode as a teacher would, in headless Chromium, and count what a class
at the back of the room would trip over.

From the start page with ``?present=true`` it presses Next until the lesson ends. On every slide it measures
every visible text element's computed size (HTML and the charts' SVG text; KaTeX keeps its own relative sizes and
counts by its base size), whether the page scrolls sideways, the height of the top row, and whether the slide's
content fits the viewport. Where a slide asks a question it checks that nothing answers it yet (no "This run:"
line), presses Reveal, and checks that the reveal drew the evidence (on the slide, or as the part's next slides)
and that the question and its answer are both on the screen without scrolling. It prints the counts per window
size, and the parts Next never reached.

With ``--class N`` the walk is a live class's: the teacher opens the sidebar with a pointer click on its » button,
starts a class there, and N students open the join link the start page's card shows, each in a browser of their own.
On every slide it then also measures: the time from the teacher's Next to each follower showing the same page,
settings, part and slide; a follower's page left empty; errors in any browser's console and closed websockets
(disconnects); a question's answer on a follower's screen before the teacher reveals it; and the overlap of the
class's join card (the code in the top row, the card on the title slide) with any chart, table, metric or text. On a
question one student answers, the teacher reveals it to the class, and every follower must show the graded answer.

    .venv/bin/python -m bench.slides_walk                    # starts its own server; 1280x720 and 1920x1080
    .venv/bin/python -m bench.slides_walk --url http://127.0.0.1:8501 --sizes 1280x720
    .venv/bin/python -m bench.slides_walk --class 3 --sizes 1280x720   # a live class of 3 followers

``tests/browser/test_slides.py`` runs the same walk, and the live class's with one follower, and asserts the counts
are zero.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
TEXT_PX, HEADING_PX, CHROME_PX = 24, 36, 80  # slides.TEXT_PX, slides.HEADING_PX, the top row's most
MAX_SLIDES = 160  # the lesson has about 130 slides (the Dictionary page added 12): Next stops here at the latest
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
  const heading = document.querySelector('.st-key-slide h3');  // a part's heading, in the slide's stage
  const numbers = (caption.match(/\\d+/g) || []).map(Number);
  return {path: location.pathname, query: location.search, part: heading ? heading.textContent.trim() : '',
          k: numbers[0] || 0, n: numbers[1] || 0, sub: numbers.length > 2 ? numbers.slice(2) : [1, 1]};
}"""

QUESTION = """() => {
  const reveals = [...document.querySelectorAll('button')].filter(b => /(Reveal the answer|Show the answer|Reveal to the class)$/
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


SHOWN = """() => {
  const main = document.querySelector('[data-testid="stMain"]');
  const drawn = main ? [...main.querySelectorAll('[data-testid="stElementContainer"]')]
    .filter(e => e.getBoundingClientRect().height > 0).length : 0;
  const answered = [...document.querySelectorAll('[data-testid="stMarkdownContainer"]')]
    .some(m => m.textContent.startsWith('This run:'));
  return {drawn, heading: !!document.querySelector('[data-testid="stMain"] :is(h1, h3)'), answered};
}"""

# Every element of the class's join card (the top row's code, the title slide's card: what holds the room's code or
# its QR code) against every other visible element of the page it could cover: charts, tables, metrics, text.
OVERLAP = """code => {
  const boxes = [...document.querySelectorAll('[data-testid="stMain"] [data-testid="stElementContainer"]')]
    .filter(e => e.getBoundingClientRect().height > 0 && e.getBoundingClientRect().width > 0);
  const spaced = code.slice(0, 4) + ' ' + code.slice(4);
  const card = boxes.filter(e => e.textContent.includes(spaced) || e.textContent.includes(code)
    || (e.querySelector('img') && /room=/.test(e.closest('[data-testid="stVerticalBlock"]')?.textContent || '')));
  const content = boxes.filter(e => !card.some(c => c.contains(e) || e.contains(c))
    && e.querySelector('.main-svg, table, [data-testid="stMetric"], [data-testid="stMarkdownContainer"], canvas'));
  const hits = [];
  for (const c of card) { const a = c.getBoundingClientRect();
    for (const e of content) { const b = e.getBoundingClientRect();
      const w = Math.min(a.right, b.right) - Math.max(a.left, b.left), h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
      if (w > 1 && h > 1) hits.push(e.textContent.trim().slice(0, 40)); } }
  return {card: card.length, hits};
}"""


@dataclass
class Follower:
    """A student's browser in a live class: what went wrong on it, and how long it took to follow each move."""
    page: object
    lags: list[tuple[str, float]] = field(default_factory=list)  # slide, s from the teacher's Next to this screen on it
    missed: list[str] = field(default_factory=list)     # slides it did not reach within FOLLOW_S
    blank: list[str] = field(default_factory=list)      # slides on which its page was empty
    early: list[str] = field(default_factory=list)      # slides on which it showed an answer before the reveal
    ungraded: list[str] = field(default_factory=list)   # revealed questions it did not draw graded within FOLLOW_S
    errors: list[str] = field(default_factory=list)     # console errors and page errors
    closed: list[int] = field(default_factory=lambda: [0])  # websockets closed: disconnects (counted by ``_watch``)


FOLLOW_S = 10.0  # a follower not on the teacher's slide by then has missed it (the goal is 2 s: the bench prints lags)


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
    followers: list[Follower] = field(default_factory=list)  # a live class's students
    sidebar_by_pointer: bool = True  # the teacher opened the sidebar, presenting, by a pointer click on its »
    join_link: str = ""  # the link the title slide's card gave, which the followers opened
    overlaps: list[str] = field(default_factory=list)  # slide: element the join card covered
    uncounted: list[str] = field(default_factory=list)  # revealed questions whose class's answers missed a student's
    teacher_s: list[float] = field(default_factory=list)  # s from each Next to the teacher's screen drawn
    teacher_errors: list[str] = field(default_factory=list)
    teacher_closed: list[int] = field(default_factory=lambda: [0])

    def class_counts(self) -> dict[str, float | int]:
        """A live class's figures: what went wrong on any screen, and how fast the followers followed."""
        f, lags = self.followers, [lag for follower in self.followers for _, lag in follower.lags]
        return {"followers": len(f), "teacher's Next to own screen p50 s": _quantile(self.teacher_s, 0.5),
                "teacher's Next to own screen p95 s": _quantile(self.teacher_s, 0.95),
                "follows": len(lags), "teacher's screen to a follower's p50 s": _quantile(lags, 0.5),
                "teacher's screen to a follower's p95 s": _quantile(lags, 0.95),
                "teacher's screen to a follower's max s": _quantile(lags, 1.0),
                "slides a follower missed": sum(len(x.missed) for x in f),
                "blank follower pages": sum(len(x.blank) for x in f),
                "answers shown before reveal": sum(len(x.early) for x in f),
                "reveals not drawn graded": sum(len(x.ungraded) for x in f),
                "answers the reveal did not count": len(self.uncounted),
                "page errors": len(self.teacher_errors) + sum(len(x.errors) for x in f),
                "disconnects": self.teacher_closed[0] + sum(x.closed[0] for x in f),
                "join card overlaps": len(self.overlaps), "sidebar opened by a click": int(self.sidebar_by_pointer)}

    def counts(self) -> dict[str, float | int]:
        s = self.slides
        return {"slides": len(s), "texts under size": sum(len(x.small) for x in s),
                "smallest font px": min((x.smallest for x in s), default=float("nan")),
                "questions": sum(x.question for x in s),
                "answered before reveal": sum(x.answered_early or (x.question and not x.evidence_withheld) for x in s),
                "scroll for question/answer": sum(x.scroll_for_answer for x in s),
                "slides that do not fit": sum(not x.fits for x in s), "sideways scroll": sum(x.sideways for x in s),
                "top row over 80 px": sum((x.chrome_px or 0) > CHROME_PX for x in s), "parts missed": len(self.missed)}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _slide_name(page) -> tuple[str, dict, str]:
    """(the slide's name: its page, part and slide number; the SLIDE reading it comes from; its stop, the page with
    its settings)."""
    where = page.evaluate(SLIDE)
    stop = where["path"] + re.sub(r"[?&](part|present|room)=[^&]*", "", where["query"])
    return f"{stop} · {where['part'][:40]} · slide {where['sub'][0]} of {where['sub'][1]}", where, stop


def settle(page) -> None:
    """Until the script run has finished (not running for 0.3 s) and every chart has drawn."""
    quiet = 0
    for _ in range(1500):
        time.sleep(0.1)
        quiet = quiet + 1 if page.evaluate(IDLE) else 0
        if quiet >= 3:
            break
    page.wait_for_function(CHARTS_DRAWN, timeout=60_000)


def _measure(page) -> dict:
    return page.evaluate(MEASURE, [TEXT_PX, HEADING_PX])


def _watch(page, errors: list[str], closed: list[int]) -> None:
    """Collect ``page``'s console errors and uncaught exceptions, and count its websockets that close. Streamlit's
    frontend first asks a page's path for its health and host config (``/patterns/_stcore/health``), then the root's:
    those two 404s are its design, not errors."""
    page.on("console", lambda message: message.type == "error" and "Failed to load resource" not in message.text
            and errors.append(message.text[:200]))
    page.on("pageerror", lambda error: errors.append(str(error)[:200]))
    page.on("response", lambda response: response.status >= 400
            and not re.search(r"/_stcore/(health|host-config)$", response.url)
            and errors.append(f"HTTP {response.status} {response.url}"))
    page.on("websocket", lambda socket: socket.on("close", lambda _: closed.__setitem__(0, closed[0] + 1)))


def _start_class(page, report: Walk) -> str:
    """The teacher, presenting on the start page, opens the sidebar with a pointer click on its », starts a class,
    closes the join dialog that opens and the sidebar; the join link the title slide's card shows."""
    button = page.locator('[data-testid="stExpandSidebarButton"]').bounding_box()
    page.mouse.click(button["x"] + button["width"] / 2, button["y"] + button["height"] / 2)
    sidebar = page.locator('[data-testid="stSidebar"]')
    try:
        page.wait_for_function("document.querySelector('[data-testid=\"stSidebar\"]').dataset.collapsed === 'false'",
                               timeout=5_000)
    except Exception:  # the click did not open it: note it, and open it as a script would
        report.sidebar_by_pointer = False
        page.locator('[data-testid="stExpandSidebarButton"] button').click(force=True)
    sidebar.get_by_text("Live class").click()
    sidebar.get_by_role("button", name="Start a class").click()
    page.get_by_role("dialog").get_by_text("Join the class:").wait_for(timeout=30_000)
    page.keyboard.press("Escape")
    page.locator('[data-testid="stSidebarCollapseButton"] button').click(force=True)
    settle(page)
    return page.locator('[data-testid="stMain"] a[href*="room="]').first.get_attribute("href")


def _file(name: str) -> str:
    """A slide's name as a file name."""
    return re.sub(r"[^\w]+", "-", name).strip("-")[:80]


def _same_slide(mine: dict, theirs: dict) -> bool:
    """Whether two screens show the same view: page, settings (the room's key aside), part and slide."""
    def view(where: dict) -> tuple:
        settings = sorted((key, value) for key, value in parse_qsl(where["query"].lstrip("?")) if key != "room")
        return where["path"], settings, where["part"], where["k"], where["n"], where["sub"]
    return view(mine) == view(theirs)


def _follow(followers: list[Follower], teacher: dict, since: float, name: str, shots: Path | None) -> None:
    """Each follower until it shows the teacher's slide, drawn (its lag from ``since``, when the teacher's screen had
    drawn it), or FOLLOW_S: a follower on the slide whose page is still empty then is blank, one elsewhere missed
    it."""
    for follower in followers:
        while True:
            there = _same_slide(follower.page.evaluate(SLIDE), teacher)
            shown = follower.page.evaluate(SHOWN)
            if there and shown["drawn"] >= 2 and shown["heading"]:
                follower.lags.append((name, time.monotonic() - since))
                break
            if time.monotonic() - since > FOLLOW_S:
                (follower.blank if there else follower.missed).append(name)
                if shots:
                    follower.page.screenshot(path=shots / f"follower-{'blank' if there else 'missed'}-{_file(name)}.png")
                break
            time.sleep(0.05)


def walk(browser, url: str, width: int, height: int, followers: int = 0, shots: Path | None = None) -> Walk:
    """The whole lesson from the start page in presentation mode, in a fresh browser context; as the teacher of a
    live class with ``followers`` students, each in a browser context of their own. Each slide that does not fit
    its screen is saved as a PNG in ``shots``, revealed, with the first follower's screen beside it."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    report = Walk(f"{width}x{height}")
    _watch(page, report.teacher_errors, report.teacher_closed)
    page.goto(f"{url}/?present=true")
    page.locator("h1").first.wait_for(timeout=120_000)
    settle(page)
    code, contexts = None, []
    if followers:
        link = report.join_link = _start_class(page, report)
        code = re.search(r"room=([A-Z0-9]+)", link)[1]
        for _ in range(followers):
            contexts.append(browser.new_context(viewport={"width": 1280, "height": 800}))
            student = Follower(contexts[-1].new_page())
            _watch(student.page, student.errors, student.closed)
            student.page.goto(link)
            report.followers.append(student)
        _follow(report.followers, page.evaluate(SLIDE), time.monotonic(), "joining", shots)
    seen, parts, since = set(), {}, time.monotonic()
    for _ in range(MAX_SLIDES):
        name, where, stop = _slide_name(page)
        for _ in range(10):  # a busy server (CI runs two test processes) may still be settling the slide Next chose
            if name not in seen:
                break
            time.sleep(0.3)
            page.wait_for_function(IDLE, timeout=120_000, polling=50)
            name, where, stop = _slide_name(page)
        if name in seen:  # Next came back to a slide already walked: the walk is over (or lost: parts missed)
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
        if code:
            _follow(report.followers, where, since, name, shots)
            covered = page.evaluate(OVERLAP, code)
            report.overlaps += [f"{name}: {hit}" for hit in covered["hits"]]
            for follower in report.followers:
                if follower.page.evaluate(SHOWN)["answered"]:
                    follower.early.append(name)
        if question["open"]:
            slide.answered_early = question["answered"] > 0
            slide.scroll_for_answer = question["bottom"] > question["H"]
            answered = False
            if code:  # one student answers, so the reveal has a count to show
                student = report.followers[0].page
                group = student.get_by_role("radiogroup", name=re.compile("^your (answer|prediction)"))
                if group.count():
                    group.first.get_by_role("radio").first.check(force=True)
                    settle(student)  # the answer's run has stored it
                    answered = True
            for _ in range(question["open"]):  # every question on the slide: the evidence may answer several
                page.get_by_role("button", name=re.compile(r"(Reveal the answer|Show the answer|Reveal to the class)$")
                                 ).first.click()
                settle(page)
            revealed_at = time.monotonic()
            if answered and not page.get_by_text(re.compile(r"^The class's answers \([1-9]")).count():
                report.uncounted.append(name)
            after, revealed = _measure(page), page.evaluate(QUESTION)
            # the reveal drew evidence: on this slide, or as the part's next slides
            slide.evidence_withheld = (revealed["evidence"] > question["evidence"]
                                       or revealed["slides"] > question["slides"])
            slide.scroll_for_answer |= (revealed["answerBottom"] or 0) > revealed["H"]
            slide.small += [text for text in after["small"] if text not in slide.small]
            slide.smallest = min(slide.smallest, after["smallest"])
            slide.fits &= after["bottom"] is None or after["bottom"] <= after["height"]
            slide.overflow_px = max(slide.overflow_px, (after["bottom"] or 0) - after["height"])
            for follower in report.followers:
                while not follower.page.evaluate(SHOWN)["answered"]:
                    if time.monotonic() - revealed_at > FOLLOW_S:
                        follower.ungraded.append(name)
                        break
                    time.sleep(0.05)
        if shots and not slide.fits:
            shot = _file(name)
            page.screenshot(path=shots / f"slide-{width}x{height}-{shot}.png")
            if report.followers:
                report.followers[0].page.screenshot(path=shots / f"slide-{width}x{height}-{shot}-follower.png")
        report.slides.append(slide)
        forward = page.get_by_role("button", name="Next").or_(page.get_by_role("link", name="Next"))
        if forward.count() == 0 or forward.first.is_disabled():  # the lesson's end: a disabled button
            break
        clicked = time.monotonic()
        forward.first.click()
        page.wait_for_function(f"() => JSON.stringify(({SLIDE})()) != {json.dumps(json.dumps(where))}",
                               timeout=120_000)
        page.wait_for_function(IDLE, timeout=120_000, polling=50)
        since = time.monotonic()  # the teacher's own screen has drawn the slide: the followers' clock starts
        report.teacher_s.append(since - clicked)
        settle(page)
    for k, slide in enumerate(report.slides):  # a part of two questions draws its evidence once both are revealed
        if slide.question and not slide.evidence_withheld:
            slide.evidence_withheld = any(later.part == slide.part and later.question and later.evidence_withheld
                                          for later in report.slides[k + 1:])
    report.missed = [f"{stop} · part {k} of {n}" for stop, (n, shown) in parts.items() for k in range(1, n + 1)
                     if k not in shown]
    report.teacher_closed = list(report.teacher_closed)  # the counts so far: closing a browser closes its websocket
    for follower in report.followers:
        follower.closed = list(follower.closed)
    for each in contexts + [context]:
        each.close()
    return report


def serve(port: int) -> subprocess.Popen:
    """The app on ``port``, listening on every interface as a classroom's server does, its class's public address
    a second loopback address (127.0.0.2): a join link students open, not the teacher's browser's address."""
    process = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.port",
                                str(port), "--server.address", "0.0.0.0", "--server.headless", "true"], cwd=ROOT,
                               env={**os.environ, "CLASSROOM_PUBLIC_URL": f"http://127.0.0.2:{port}"},
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
    parser.add_argument("--class", dest="followers", type=int, default=0,
                        help="walk as the teacher of a live class with this many followers")
    parser.add_argument("--shots", type=Path, help="save each slide that does not fit its screen here, as a PNG")
    parser.add_argument("--verbose", action="store_true", help="every slide's line, and each small text")
    args = parser.parse_args()
    server = None if args.url else serve(args.port)
    url = args.url or f"http://127.0.0.1:{args.port}"
    print(f"$ .venv/bin/python -m bench.slides_walk {' '.join(sys.argv[1:])}")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"])
            walks = [walk(browser, url, *map(int, size.split("x")), args.followers, args.shots) for size in args.sizes.split(",")]
            browser.close()
    finally:
        if server:
            server.terminate()
    counts = [w.counts() | (w.class_counts() if args.followers else {}) for w in walks]
    print(f"{'':40}" + "".join(f"{w.size:>14}" for w in walks))
    for key in counts[0]:
        print(f"{key:40}" + "".join(f"{c[key]:>14.2f}" if key.endswith(" s") else f"{c[key]:>14.0f}"
                                    if isinstance(c[key], float) else f"{c[key]:>14}" for c in counts))
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
        for k, follower in enumerate(w.followers):
            for slide, lag in follower.lags:
                if lag > 2.0 or args.verbose:
                    print(f"  {w.size} follower {k}: {lag:.2f} s to {slide}")
            for what, where in (("missed", follower.missed), ("blank", follower.blank), ("early answer", follower.early),
                                ("not graded", follower.ungraded), ("error", follower.errors)):
                for each in where:
                    print(f"  {w.size} follower {k}: {what}: {each}")
        for each in w.teacher_errors + w.overlaps + [f"not counted: {name}" for name in w.uncounted]:
            print(f"  {w.size} teacher: {each}")


if __name__ == "__main__":
    main()
