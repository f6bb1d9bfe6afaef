"""The loss plot written at the end of training (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path


def smooth(values: list[float], weight: float = 0.6) -> list[float]:
    """Exponential moving average, as TensorBoard draws it."""
    out, last = [], None
    for value in values:
        last = value if last is None else last * weight + (1 - weight) * value
        out.append(last)
    return out


def plot_loss(metrics: list[dict], out_path: Path, title: str = "training loss") -> Path | None:
    """Draw loss (and eval loss when present) against step; None when there is nothing to draw."""
    train = [(m["step"], m["loss"]) for m in metrics if m.get("loss") is not None]
    evals = [(m["step"], m["eval_loss"]) for m in metrics if m.get("eval_loss") is not None]
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if train:
        steps, losses = zip(*train)
        ax.plot(steps, losses, color="#9bb8d3", alpha=0.6, label="loss")
        if len(losses) > 2:
            ax.plot(steps, smooth(list(losses)), color="#1f5fa0", label="loss (smoothed)")
    if evals:
        steps, losses = zip(*evals)
        ax.plot(steps, losses, "o-", color="#d0632b", label="eval loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path)
    plt.close(fig)
    return out_path
