"""The pipeline's Markdown report."""


def _bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def write_report(path, *, source, params, stages, counts, accuracy, outliers, plots,
                 train, hand_offs):
    lines = [
        "# zerohop ECG pipeline report",
        "",
        f"- input: {source}",
        f"- sampling rate: {params['rate']:g} Hz; Ricker width {params['ricker_width']}, "
        f"gate window {params['window']}, kept lengths {params['min_length']}..{params['max_length']}, "
        f"beat width {params['width']} samples",
        f"- samples: {counts['samples']:,}; gates: {counts['gates']:,}; beats kept: "
        f"{counts['beats']:,} ({counts['pruned_percent']:.1f} % of segments pruned)",
        f"- LightVAE: {train['epochs']} epochs, batch {train['batch_size']}, final training loss "
        f"{train['final_loss']:.5f}, test loss {train['test_loss']:.5f} ({train['device']})",
        "",
        "## Stages",
        "",
        "| stage | seconds | bytes copied |",
        "|---|---|---|",
    ]
    for name, seconds, copied in stages:
        lines.append(f"| {name} | {seconds:.4f} | {_bytes(copied)} |")
    lines += [
        "",
        "Bytes copied count data moved between frameworks or stages; computing a new result "
        "(curvature, beats, latents) is not a copy.",
        "",
        "## Hand-offs (pointer identity checked)",
        "",
        "| from → to | address | same memory |",
        "|---|---|---|",
    ]
    for label, address, same in hand_offs:
        lines.append(f"| {label} | 0x{address:x} | {'yes' if same else 'NO'} |")
    if accuracy is not None:
        lines += [
            "",
            "## Beat detection against the synthetic ground truth",
            "",
            f"- sensitivity {accuracy['sensitivity'] * 100:.2f} %, positive predictive value "
            f"{accuracy['ppv'] * 100:.2f} % (tolerance {accuracy['tolerance_ms']:.0f} ms; "
            f"TP {accuracy['tp']}, FP {accuracy['fp']}, FN {accuracy['fn']})",
        ]
    lines += [
        "",
        "## Most outlying beats (highest reconstruction error)",
        "",
        "| rank | beat | start sample | time (s) | length | reconstruction error |",
        "|---|---|---|---|---|---|",
    ]
    for rank, row in enumerate(outliers, 1):
        lines.append(f"| {rank} | {row['beat']} | {row['start']} | {row['time']:.2f} | "
                     f"{row['length']} | {row['error']:.5f} |")
    lines += ["", "## Figures", ""]
    for name, png in plots.items():
        lines += [f"### {name.replace('_', ' ')}", "", f"![{name}]({png.name})", ""]
    path.write_text("\n".join(lines) + "\n")
    return path
