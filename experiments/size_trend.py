"""The size trend: agreement between DEER and the likelihood probes against parameter count.

Each model's parameter count comes from its run folder's metadata; the paper's points are the OPT family's
(its Tables 4 and 7; LAMA single-token protocol).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from deer.base.files import save_figure, write_json, write_table, write_text
from deer.platform.read_back import read_json_object
from deer.platform.tables import markdown_table

PAPER_POINTS = [
    {"pair": "deer vs lama", "model": "OPT-125M", "parameters": 125e6, "r": 0.37, "source": "DEER paper Table 4"},
    {"pair": "deer vs lama", "model": "OPT-350M", "parameters": 331e6, "r": 0.50, "source": "DEER paper (design notes)"},
    {"pair": "deer vs lama", "model": "OPT-6.7B", "parameters": 6.7e9, "r": 0.81, "source": "DEER paper Table 4"},
    {"pair": "deer vs bear", "model": "OPT-125M", "parameters": 125e6, "r": 0.14, "source": "DEER paper Table 7"},
    {"pair": "deer vs bear", "model": "OPT-6.7B", "parameters": 6.7e9, "r": 0.64, "source": "DEER paper Table 7"},
]
PAIRS = ("deer vs lama", "deer vs bear", "bear vs lama")


def model_parameters(run_folder: str | Path) -> int:
    metadata = read_json_object(Path(run_folder) / "metadata.json")
    return int(next(iter(metadata.values()))["model"]["parameters"])


def size_trend_table(agreement_json: str | Path) -> pd.DataFrame:
    report = read_json_object(Path(agreement_json))
    runs = dict(report["runs"])
    rows = [{"model": pair["model"], "parameters": model_parameters(runs[pair["model"]]), "pair": pair["pair"],
             "rank_type": report.get("rank_type"), "n": pair["n"], "candidates": pair.get("candidates"),
             "lama_protocol": pair.get("lama_protocol"),
             "r": pair["pearson_r_log"], "ci_low": pair["pearson_r_log_ci_low"], "ci_high": pair["pearson_r_log_ci_high"],
             "spearman_rho": pair.get("spearman_rho")} for pair in report["pairs"] if pair["pair"] in PAIRS]
    return pd.DataFrame(rows).sort_values(["pair", "parameters"], ignore_index=True)


def write_size_trend(agreement_json: str | Path, out: str | Path) -> pd.DataFrame:
    from experiments.plots import size_trend

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = size_trend_table(agreement_json)
    write_table(out / "size_trend.csv", table)
    rows = [{"pair": row.pair, "model": row.model, "parameters": f"{row.parameters / 1e6:,.0f}M", "n": row.n,
             "ranks": row.rank_type, "r (log ranks)": row.r, "95% CI": f"[{row.ci_low:.2f}, {row.ci_high:.2f}]",
             "Spearman": row.spearman_rho,
             "LAMA protocol": row.lama_protocol} for row in table.itertuples()]
    write_text(out / "size_trend.md", markdown_table(rows, {"r (log ranks)": ".3f", "Spearman": ".3f"})
               + "\nPaper (OPT family; DEER vs LAMA with LAMA's single-token protocol):\n\n"
               + markdown_table(pd.DataFrame(PAPER_POINTS)[["pair", "model", "r", "source"]], {"r": ".2f"}))
    points = table.to_dict(orient="records")
    write_json(out / "size_trend.json", {"points": points, "paper": PAPER_POINTS, "agreement": str(agreement_json)})
    save_figure(out / "size_trend.png", size_trend(points, PAPER_POINTS), dpi=130, bbox_inches="tight")
    return table
