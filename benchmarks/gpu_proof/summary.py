"""The GPU proof's summary: one table row per stage (``summary_rows``, printed after a run), and
``--costs``: GPU-hours from a run's summary.json as costs.json and report.md (the cost model is
dashrepro.experiment.plan's).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .common import paper_config


def write_json(path: Path, value) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value, indent=1, default=str))
    os.replace(tmp, path)


def objective_cell(result: dict) -> str:
    """One objective path: time, peak memory and the compulsory bytes' rate."""
    if "error" in result:
        return f"{result['path']} error"
    rate = result["bytes_moved"] / result["seconds"] / 1e9
    return (f"{result['path']} {1e3 * result['seconds']:.2f} ms {result['peak_mib']:.0f} MiB "
            f"{rate:.0f} GB/s")  # fmt: skip


def summary_rows(results: dict) -> list[str]:
    rows = ["| stage | ok | seconds | what was measured |", "|---|---|---|---|"]
    for stage, result in results.items():
        if not result.get("ok"):
            last = result.get("log_tail", "").strip().splitlines()[-1:] or [""]
            what = f"exit {result.get('exit')}: {last[0][:150]}"
        elif stage == "profile":
            what = "; ".join(
                f"{k}: {r['ms_per_decode_step']} ms a decode step, {r['tokens_per_second']} "
                f"tokens/s, kernels {r['kernel_share']} of the time ({r['kernels_per_decode_step']} "
                "a step)"
                for k, r in result.items() if k in ("lora", "base")
            )  # fmt: skip
        elif stage == "deepspeed":
            what = (f"{result['steps']} steps of {result['max_new_tokens']} tokens, killed after "
                    f"state {result['killed_after_state']} and resumed: same adapter "
                    f"{result['same_adapter']} (max |diff| {result['max_abs_difference']}), step "
                    f"{result['mean_step_s']} s (optimizer {result['mean_s_optimizer']})")  # fmt: skip
        elif stage.startswith("train"):
            what = (f"{result['steps']} steps ({result['rollout_backend']}), step "
                    f"{result.get('mean_step_s')} s = rollout {result.get('mean_s_rollout')} + "
                    f"teacher {result.get('mean_s_teacher')} + student "
                    f"{result.get('mean_s_student')} + optimizer "
                    f"{result.get('mean_s_optimizer')}; peak {result['peak_gib']} GiB")  # fmt: skip
        elif stage == "evaluate":
            what = (
                f"{result['responses']} responses ({result['backend']}), "
                f"{result['tokens_per_second']} tokens/s, peak {result['peak_gib']} GiB"
            )
        elif stage == "build":
            what = f"{result['parameters']:,} parameters, saved in {result['save_seconds']} s"
        elif stage == "objectives":
            what = "; ".join(f"{k}: " + ", ".join(objective_cell(r) for r in v["results"])
                             for k, v in result.items() if k.startswith("T"))  # fmt: skip
        elif stage == "smoke":
            what = (
                f"train {result['train']['steps']} steps, evaluate "
                f"{result['evaluate']['responses']} responses"
            )
        else:
            what = ", ".join(f"{k} {v}" for k, v in result.items()
                             if k not in ("ok", "seconds"))[:300]  # fmt: skip
        if result.get("note"):
            what += f" ({result['note']})"
        rows.append(f"| {stage} | {result.get('ok')} | {result.get('seconds')} | {what} |")
    return rows


def write_costs_report(args, out: Path) -> None:
    """--costs: GPU-hours from the measured speeds in ``out``'s summary, as costs.json and a
    report.md beside it (the cost model: dashrepro.experiment.plan)."""
    from dashrepro.experiment.plan import costs_markdown, measured_costs, plan_with_costs

    config = paper_config(args)
    summary = json.loads((out / "summary.json").read_text())
    costs = measured_costs(summary, config, args.mean_response_tokens)
    costs["plan"] = plan_with_costs(config, costs)
    write_json(out / "costs.json", costs)
    report = "\n".join(["# GPU proof", "", f"Device: {summary.get('env', {}).get('device')}.",
                        "", *summary_rows(summary), "", "## GPU-hours from these speeds", "",
                        costs_markdown(costs, costs["plan"]), ""])  # fmt: skip
    tmp = out / ".report.md.tmp"
    tmp.write_text(report)
    os.replace(tmp, out / "report.md")
    print(report)
