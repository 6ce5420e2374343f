"""The benches' log: one row per recorded run, in the table under "## Log" at the end of bench/RESULTS.md.

A bench records what it measured, and reads back what was last recorded for the same bench, to print beside its own
figures (so a regression shows whenever anyone runs it):

    from bench import results
    results.record("classroom_load --clients 30", "p50 51 ms · p95 212 ms · slowest page's p95 342 ms")
    results.last("classroom_load --clients 30")  # -> "p50 51 ms · p95 212 ms · slowest page's p95 342 ms"

``bench`` names the run as its command line does after ``python -m bench.``, with the options that change what is
measured (``classroom_load --clients 30``, ``classroom_load --room --clients 30``, ``slides_walk --class 3``), so
that runs of the same kind find each other. By hand:

    .venv/bin/python -m bench.results "classroom_load --clients 30" "p50 51 ms · p95 212 ms"   # record a row
    .venv/bin/python -m bench.results "classroom_load --clients 30"                           # print the last

Standard library only.
"""

import datetime
import subprocess
import sys
from pathlib import Path

__all__ = ["RESULTS", "HEADING", "record", "last", "report", "commit"]

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "RESULTS.md"
HEADING = "## Log"
HEADER = "| date | commit | bench | figures |\n| --- | --- | --- | --- |\n"


def commit() -> str:
    """This checkout's commit, ``git rev-parse --short HEAD``, with ``+dirty`` when a tracked file other than
    bench/RESULTS.md differs from it (the log's own rows do not make the code dirty); ``unknown`` outside git."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                  ":(exclude)bench/RESULTS.md"],
                                 cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if changed else "")


def _cell(text: str) -> str:
    """``text`` as one table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _cells(line: str) -> list[str]:
    """A table row's cells, unescaped: ``| a | b \\| c |`` -> ["a", "b | c"]."""
    inner = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    cells, current, escaped = [], "", False
    for char in inner:
        if escaped:
            current += char if char == "|" else "\\" + char
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == "|":
            cells.append(current.strip())
            current = ""
        else:
            current += char
    cells.append((current + ("\\" if escaped else "")).strip())
    return cells


def _log_lines(text: str) -> tuple[list[str], int, int]:
    """The file's lines and the log section's span [start, end): from its heading to the next "## " heading or the
    end. (-1, -1) when the file has no log section."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == HEADING), -1)
    if start < 0:
        return lines, -1, -1
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines, start, end


def record(bench: str, figures: str) -> None:
    """Append ``| date | commit | bench | figures |`` to the log's table in bench/RESULTS.md: today's date
    (YYYY-MM-DD), :func:`commit`, ``bench`` as in the module's docstring, and ``figures`` in the words the bench
    prints (one line; a ``|`` is escaped). The heading and the table are created when missing (the file too)."""
    row = f"| {datetime.date.today().isoformat()} | {commit()} | {_cell(bench)} | {_cell(figures)} |"
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "# Benchmark results\n"
    lines, start, end = _log_lines(text)
    if start < 0:
        text = text.rstrip("\n") + f"\n\n{HEADING}\n\n{HEADER}{row}\n"
    else:
        rows = [i for i in range(start + 1, end) if lines[i].lstrip().startswith("|")]
        if rows:
            lines.insert(rows[-1] + 1, row)
        else:  # a heading with no table under it yet
            lines[start + 1:start + 1] = ["", *HEADER.rstrip("\n").split("\n"), row]
        text = "\n".join(lines) + "\n"
    RESULTS.write_text(text, encoding="utf-8")


def last(bench: str) -> str | None:
    """The figures of the last row logged for ``bench`` (compared after the same whitespace folding ``record``
    applies), or None when the log has none (or there is no log)."""
    if not RESULTS.exists():
        return None
    lines, start, end = _log_lines(RESULTS.read_text(encoding="utf-8"))
    wanted = " ".join(bench.split())
    found = None
    for line in lines[max(start, 0) + 1:end] if start >= 0 else []:
        if not line.lstrip().startswith("|"):
            continue
        cells = _cells(line)
        if len(cells) == 4 and cells[2] == wanted:
            found = cells[3]
    return found


def report(bench: str, figures: str, record_it: bool) -> None:
    """Print the figures last logged for ``bench`` beside a run's own (printed before), and log the run's
    ``figures`` when ``record_it`` (a bench's ``--record``)."""
    if recorded := last(bench):
        print(f"  last recorded (bench/RESULTS.md): {recorded}")
    if record_it:
        record(bench, figures)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        record(sys.argv[1], sys.argv[2])
    elif len(sys.argv) == 2:
        print(last(sys.argv[1]) or f"nothing logged for {sys.argv[1]!r}")
    else:
        sys.exit(__doc__)
