#!/usr/bin/env python3
"""Trains dsv4-mini, a small DeepSeek-V4 of the exact Flash architecture, from scratch.

    /usr/bin/python3 train/train.py --data train/data/out --run train/runs/mini \
        --steps 3000 --export models/dsv4-mini

Deterministic per seed: the initial weights come from `--seed`, and the batch of step s is a
pure function of (seed, s), so a resumed run sees exactly the batches an uninterrupted one
would.  Every `--ckpt-every` steps the whole state (weights, optimiser, gate biases, loss
history) is written atomically to RUN/ckpt.pt; rerunning the same command resumes from it.
The loss curve is written as RUN/loss.csv and RUN/loss.png.  See docs/training.md.
"""
import argparse
import csv
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsv4mini import runtime  # noqa: E402

runtime.set_env_before_torch()  # OMP_WAIT_POLICY=PASSIVE, read when torch loads libgomp

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dsv4mini.config import ModelConfig  # noqa: E402
from dsv4mini.model import Transformer  # noqa: E402
from dsv4mini import checkpoint as ckpt_io  # noqa: E402
from dsv4mini.tokens import TokenFile  # noqa: E402

CSV_FIELDS = ["step", "tokens", "loss", "lm", "mtp", "indexer", "lr", "tok_per_s",
              "val_prose", "val_chat", "max_load_frac"]


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join(os.path.dirname(__file__), "configs",
                                                    "dsv4-mini.json"))
    p.add_argument("--data", required=True, help="output folder of train/data/build.py")
    p.add_argument("--run", required=True, help="run folder (checkpoint, loss curve)")
    p.add_argument("--export", default="", help="write the final model here (HF format)")
    p.add_argument("--overwrite", action="store_true",
                   help="let --export replace an existing model directory (atomically)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.1)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--mtp-weight", type=float, default=0.3)
    p.add_argument("--indexer-weight", type=float, default=0.1)
    p.add_argument("--bias-rate", type=float, default=1e-3,
                   help="aux-loss-free gate bias update speed (DeepSeek-V3 uses 1e-3)")
    p.add_argument("--qat-from", type=float, default=0.8,
                   help="fraction of the steps after which FP8/FP4 fake quantisation is on "
                        "(1 = never)")
    p.add_argument("--matmul", choices=("auto", "bf16", "fp32"), default="auto",
                   help="operands of the large matrix products: bf16 (FP32 accumulation; "
                        "mixed precision) or fp32; auto = bf16 where the CPU has AVX512-BF16 "
                        "or AMX, else fp32 (docs/training.md)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--ckpt-every", type=int, default=100)
    p.add_argument("--val-windows", type=int, default=16)
    p.add_argument("--export-only", action="store_true",
                   help="export the run's last checkpoint to --export without training further")
    p.add_argument("--max-minutes", type=float, default=0,
                   help="stop (checkpointed, resumable) after this much wall time; 0 = no limit")
    return p.parse_args(argv)


def fail(msg):
    print(f"train.py: {msg}", file=sys.stderr)
    sys.exit(2)


def load_config(path):
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"cannot read config {path}: {e}")
    cfg = ModelConfig.from_dict(raw)
    try:
        cfg.validate()
    except ValueError as e:
        fail(f"{path}: {e}")
    return raw, cfg


def batch_for_step(data, seed, step, batch, seq_len):
    """Windows of seq_len + 1 tokens at offsets drawn from (seed, step) alone."""
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(data) - seq_len - 1, size=batch)
    return torch.from_numpy(np.stack([data.window(s, seq_len + 1) for s in starts]))


def fixed_windows(data, seed, count, seq_len):
    """Evenly spaced windows (the same in every run) for validation losses."""
    n = len(data) - seq_len - 1
    if n <= 0:
        return None
    starts = np.linspace(0, n, num=min(count, n), dtype=np.int64)
    return torch.from_numpy(np.stack([data.window(int(s), seq_len + 1) for s in starts]))


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    floor = args.lr * args.min_lr_frac
    return floor + 0.5 * (args.lr - floor) * (1 + math.cos(math.pi * min(1.0, t)))


def losses(model, tokens, cfg):
    """LM, MTP and indexer terms of one batch [B, T+1]."""
    x, y = tokens[:, :-1], tokens[:, 1:]
    out = model(x, mtp=cfg.num_nextn_predict_layers > 0)
    v = out["logits"].shape[-1]
    lm = F.cross_entropy(out["logits"].reshape(-1, v), y.reshape(-1))
    mtp = torch.zeros(())
    if "mtp_logits" in out and out["mtp_logits"] is not None:
        # Row q (input h_q and token q+1) predicts token q+2 = y[:, q+1].
        mtp = F.cross_entropy(out["mtp_logits"].reshape(-1, v), y[:, 1:].reshape(-1))
    idx = out.get("indexer_loss", torch.zeros(()))
    return lm, mtp, idx, out.get("expert_load")


@torch.no_grad()
def val_loss(model, windows, cfg):
    if windows is None:
        return float("nan")
    model.eval()
    total = 0.0
    for i in range(0, windows.shape[0], 4):
        lm, _, _, _ = losses(model, windows[i:i + 4], cfg)
        total += lm.item() * windows[i:i + 4].shape[0]
    model.train()
    return total / windows.shape[0]


def param_groups(model, wd):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 and "hc_" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def save_state(path, model, opt, step, history):
    tmp = path + ".tmp"
    torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict(),
                "history": history}, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_curve(run, history):
    path = os.path.join(run, "loss.csv")
    with open(path + ".tmp", "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for row in history:
            w.writerow(row)
    os.replace(path + ".tmp", path)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(8, 4.5))
    steps = [r["step"] for r in history]
    ax.plot(steps, [r["lm"] for r in history], label="train LM", linewidth=0.8)
    ax.plot(steps, [r["mtp"] for r in history], label="train MTP (token +2)", linewidth=0.8)
    for key, label in (("val_prose", "held-out prose"), ("val_chat", "held-out chat")):
        pts = [(r["step"], r[key]) for r in history if r[key] == r[key]]
        if pts:
            ax.plot(*zip(*pts), "o-", label=label, markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("dsv4-mini training")
    fig.tight_layout()
    fig.savefig(os.path.join(run, "loss.png.tmp.png"), dpi=110)
    plt.close(fig)
    os.replace(os.path.join(run, "loss.png.tmp.png"), os.path.join(run, "loss.png"))


def fmt_eta(seconds):
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m{seconds % 60:02d}s"


def main(argv):
    args = parse_args(argv)
    print(f"runtime: {runtime.configure_cpu_training(args.threads)}", flush=True)
    raw_cfg, cfg = load_config(args.config)
    try:
        train = TokenFile.open(os.path.join(args.data, "train.bin"), cfg.vocab_size)
        val_prose = TokenFile.open(os.path.join(args.data, "val_prose.bin"), cfg.vocab_size)
        val_chat = TokenFile.open(os.path.join(args.data, "val_chat.bin"), cfg.vocab_size)
    except (OSError, ValueError) as e:
        fail(str(e))
    if len(train) < 4 * (args.seq_len + 1):
        fail(f"{args.data}/train.bin has {len(train)} tokens: too few for --seq-len {args.seq_len}")
    os.makedirs(args.run, exist_ok=True)

    torch.manual_seed(args.seed)
    model = Transformer(cfg, numerics="train", seed=args.seed)
    matmul = runtime.resolve_matmul(args.matmul)
    model.set_bf16_matmul(matmul == "bf16")
    print(f"matmul operands: {matmul}", flush=True)
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr,
                            betas=(0.9, 0.95), eps=1e-8)
    state_path = os.path.join(args.run, "ckpt.pt")
    step, history = 0, []
    if os.path.exists(state_path):
        state = torch.load(state_path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step, history = state["step"], state["history"]
        print(f"resumed {state_path} at step {step}", flush=True)
    vp = fixed_windows(val_prose, args.seed, args.val_windows, args.seq_len)
    vc = fixed_windows(val_chat, args.seed, args.val_windows, args.seq_len)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"dsv4-mini: {n_params / 1e6:.2f}M parameters, {len(train) / 1e6:.1f}M training "
          f"tokens, {args.steps} steps of {args.batch}x{args.seq_len}", flush=True)

    if args.export_only:
        if not args.export or step == 0:
            fail("--export-only needs --export and a checkpoint in --run")
        export(model, cfg, raw_cfg, args)
        return 0
    t_start = time.time()
    tok_per_step = args.batch * args.seq_len
    window_t, window_tokens = time.time(), 0
    while step < args.steps:
        if args.max_minutes and time.time() - t_start > args.max_minutes * 60:
            print(f"stopping at step {step} after --max-minutes {args.max_minutes}", flush=True)
            break
        model.set_qat(step >= int(args.qat_from * args.steps))
        lr = lr_at(step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        tokens = batch_for_step(train, args.seed, step, args.batch, args.seq_len)
        lm, mtp, idx, load = losses(model, tokens, cfg)
        loss = lm + args.mtp_weight * mtp + args.indexer_weight * idx
        if not torch.isfinite(loss):
            fail(f"step {step}: loss is not finite ({loss.item()}); last checkpoint kept")
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        if load is not None:
            model.update_gate_bias(load, args.bias_rate)
        step += 1
        window_tokens += tok_per_step

        if step % args.log_every == 0 or step == args.steps:
            now = time.time()
            tps = window_tokens / max(1e-9, now - window_t)
            window_t, window_tokens = now, 0
            max_frac = float("nan")
            if load is not None:
                l = torch.stack([x.float() for x in load])
                max_frac = (l.max(dim=-1).values / l.sum(dim=-1).clamp(min=1)).max().item()
            row = {"step": step, "tokens": step * tok_per_step, "loss": round(loss.item(), 4),
                   "lm": round(lm.item(), 4), "mtp": round(mtp.item(), 4),
                   "indexer": round(float(idx), 4), "lr": f"{lr:.3e}",
                   "tok_per_s": round(tps), "val_prose": float("nan"),
                   "val_chat": float("nan"), "max_load_frac": round(max_frac, 3)}
            if step % args.eval_every == 0 or step == args.steps:
                row["val_prose"] = round(val_loss(model, vp, cfg), 4)
                row["val_chat"] = round(val_loss(model, vc, cfg), 4)
            history.append(row)
            eta = (args.steps - step) * tok_per_step / max(tps, 1e-9)
            val = ""
            if row["val_prose"] == row["val_prose"]:
                val = f" val prose {row['val_prose']:.3f} chat {row['val_chat']:.3f}"
            print(f"step {step}/{args.steps} loss {loss.item():.3f} lm {lm.item():.3f} "
                  f"mtp {mtp.item():.3f} idx {float(idx):.3f} lr {lr:.2e} "
                  f"tok/s {tps:.0f} ETA {fmt_eta(eta)}{val}", flush=True)
        if step % args.ckpt_every == 0 or step == args.steps:
            save_state(state_path, model, opt, step, history)
            write_curve(args.run, history)

    if step >= args.steps and args.export:
        export(model, cfg, raw_cfg, args)
    return 0


def export(model, cfg, raw_cfg, args):
    tok_dir = os.path.join(args.data, "tokenizer")
    extra = {}
    for name in ("tokenizer.json", "tokenizer_config.json"):
        path = os.path.join(tok_dir, name)
        try:
            with open(path, "rb") as f:
                extra[name] = f.read()
        except OSError as e:
            fail(f"cannot read {path}: {e}")
    gen = {"bos_token_id": cfg.bos_token_id, "eos_token_id": cfg.eos_token_id,
           "do_sample": True, "temperature": 0.7, "top_p": 0.95}
    extra["generation_config.json"] = (json.dumps(gen, indent=2) + "\n").encode()
    try:
        ckpt_io.export_checkpoint(model, cfg, args.export, extra, overwrite=args.overwrite)
    except FileExistsError as e:
        fail(f"{e}; the trained state is kept in {args.run}: rerun with --export-only "
             "--overwrite to replace it")
    print(f"exported {args.export}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
