"""gpu_run.json's report as the tables printed at the end of a run (and kept as gpu_run.txt)."""

from __future__ import annotations


def _f(x, spec: str = ".3g", unit: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{unit}"


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _env(env: dict) -> list[str]:
    devices = env.get("devices", [])
    torch = (
        f"torch {env.get('torch', '?')} (cuda {env.get('torch_cuda')}, cudnn {env.get('cudnn')})"
    )
    return [
        "## environment",
        f"devices: {', '.join(sorted(set(devices)))} x{len(devices)}; jax {env.get('jax')}; {torch}",
        f"matmul peak ({env.get('matmul')}): {_f(env.get('peak_flops', 0) / 1e12, '.1f')} TFLOP/s; "
        f"copy bandwidth: {_f(env.get('copy_bytes_per_s', 0) / 1e9, '.0f')} GB/s "
        f"(read + write, {_f(env.get('copy_gib'), '.2f')} GiB)",
    ]


def _attention(att: dict) -> list[str]:
    lines = [
        f"## attention: GpuAttention.packed ({att.get('implementation')}) vs attention."
        f"blocked_attend, {att.get('rows')} rows, {att.get('dtype')}",
        "| case | fits | cuDNN call in program | max abs diff vs reference | max abs err vs "
        "float32: fused / reference | fused ms | reference ms |",
        "|---|---|---|---:|---|---:|---:|",
    ]
    for case, r in att.items():
        if not isinstance(r, dict):
            continue
        if "error" in r:
            lines.append(f"| {case} | {r.get('fits')} | ERROR: {r['error'][:300]} | | | | |")
            continue
        lines.append(
            f"| {case} | {r.get('fits')} | {r.get('cudnn_in_program')} | "
            f"{_f(r.get('max_abs_diff_vs_reference'), '.2e')} | "
            f"{_f(r.get('max_abs_err_fused_vs_f32'), '.2e')} / "
            f"{_f(r.get('max_abs_err_reference_vs_f32'), '.2e')} | "
            f"{_f(r.get('fused_ms'), '.2f')} | {_f(r.get('reference_ms'), '.2f')} |"
        )
    return lines


def _parity(p: dict) -> list[str]:
    if "skipped" in p:
        return ["## parity: SmolLM2-135M", f"skipped: {p['skipped']}"]
    lines = [
        f"## parity: {p.get('model')} on {p.get('device')}, lm-eval HF vs jaxeval, per request",
        "| dtype | task | requests | max abs diff | greedy flags differ | lm-eval s | jaxeval s |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for dtype in ("float32", "bfloat16"):
        r = p.get(dtype, {})
        if "error" in r:
            lines.append(f"| {dtype} | ERROR: {r['error'][:300]} | | | | | |")
            continue
        for task in ("arc_easy", "lambada"):
            t = r.get(task, {})
            lines.append(
                f"| {dtype} | {task} | {t.get('requests')} | {_f(t.get('max_abs_diff'), '.2e')} | "
                f"{t.get('greedy_differ')} | {_f(r.get('lm_eval_s'), '.1f')} | "
                f"{_f(r.get('jaxeval_s'), '.1f')} |"
            )
    return lines


def _run(r: dict) -> str:
    if r.get("status") != "ok":
        return r.get("status", "?") + (f": {r['error'][:160]}" if "error" in r else "")
    return f"{r['wall_s']:.1f} ({r['phase_s']:.1f})"


def _speed(model: str, result: dict) -> list[str]:
    lines = []
    for task, row in result.items():
        lm, jx = row.get("lm_eval", {}), row.get("jaxeval", {})
        count = row.get("count", {})
        bw = "-"
        if count.get("generated_tokens"):
            bw = (
                f"{_f(lm.get('decode_step_ms'), '.1f')} / {_f(jx.get('decode_step_ms'), '.1f')} ms; "
                f"{_pct(lm.get('decode_bw_fraction'))} / {_pct(jx.get('decode_bw_fraction'))}"
            )
        parity = row.get("parity", {})
        par = "-"
        if parity:
            par = (
                f"max {_f(parity.get('max_abs_diff'), '.2e')}, greedy {parity.get('greedy_differ')}"
            )
            if "generations_identical" in parity:
                par += f", same text {parity['generations_identical']}"
        lines.append(
            f"| {model} | {task} | {row.get('docs')} | {count.get('tokens', '-')} | {_run(lm)} | "
            f"{_run(jx)} | {_f(row.get('ratio_process'), '.2f', 'x')} | "
            f"{_f(row.get('ratio_phase'), '.2f', 'x')} | "
            f"{_pct(lm.get('mfu_process'))} / {_pct(lm.get('mfu_phase'))} | "
            f"{_pct(jx.get('mfu_process'))} / {_pct(jx.get('mfu_phase'))} | {bw} | {par} |"
        )
    return lines


def render(report: dict) -> str:
    steps = report.get("steps", {})
    out = [f"# gpu_run ({report.get('mode')} mode): {report.get('elapsed_s', 0):.0f} s of "
           f"{report.get('budget_s', 0):.0f}"]  # fmt: skip
    for name, fn in (("env", _env), ("attention", _attention), ("parity", _parity)):
        if steps.get(name, {}).get("status") == "ok":
            out += [""] + fn(steps[name]["result"])
    speed = {k.split(":", 1)[1]: v for k, v in steps.items() if k.startswith("speed:")}
    if any(v.get("status") == "ok" for v in speed.values()):
        plan = report.get("plan", {})
        out += [
            "",
            f"## speed: whole processes, lm-eval HF vs jaxeval, {plan.get('dtype')} on "
            f"{plan.get('device')}, batch size {plan.get('batch_size')}, GSM8K max_gen_toks "
            f"{plan.get('max_gen_toks')}. Seconds: process (request phase); ratio = lm-eval / "
            "jaxeval; MFU: process / request phase; decode: step time and bandwidth fraction, "
            "lm-eval / jaxeval",
            "| model | task | docs | tokens | lm-eval s | jaxeval s | ratio process | ratio requests "
            "| MFU lm-eval | MFU jaxeval | decode | answers (lm-eval vs jaxeval) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
        ]
        for model, entry in speed.items():
            if entry.get("status") == "ok":
                out += _speed(model, entry["result"])
    out += ["", "## steps", "| step | status | seconds | error |", "|---|---|---:|---|"]
    for name, entry in steps.items():
        error = entry.get("error", "").strip().splitlines()
        out.append(
            f"| {name} | {entry.get('status')} | {entry.get('seconds', 0):.1f} | "
            f"{error[-1][:300] if error else ''} |"
        )
    return "\n".join(out)
