"""``evolora report``: PNG figures and one self-contained HTML page over run directories.

    path = write_report(["runs/pop-s0", "runs/pop-s1", "runs/single-s0"], "runs/report")

The page is written by :mod:`evolora.report.page`, from the runs loaded and summarised by
:mod:`evolora.report.data` and the figures of :mod:`evolora.report.plots`.
"""

from __future__ import annotations

from evolora.report.data import load_run, summarize
from evolora.report.page import REPORT_HTML, REPORT_JSON, format_stat, summary_rows, write_report

__all__ = ["REPORT_HTML", "REPORT_JSON", "format_stat", "load_run", "summarize", "summary_rows", "write_report"]
