#!/usr/bin/env python3
"""BERT pretraining (masked LM + next-sentence prediction), data-parallel with DDP.

    accl-run -n 2 python3 pretrain.py --config tiny --backend accl --steps 50
    torchrun --nproc_per_node 2 pretrain.py --config base --backend gloo

Ranks come from the launcher's environment (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT); without it the script runs as a single process. The corpus is
one sentence per line with a blank line between documents (the input format
of Google's create_pretraining_data.py); without --corpus the King James
Bible from Debian's bible-kjv package is used (public domain).
"""
import argparse
import resource
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from data import PretrainingData, read_documents  # noqa: E402
from model import CONFIGS, BertForPreTraining, make_config  # noqa: E402
from tokenization import WordPiece, build_vocab, load_vocab, save_vocab  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="tiny", choices=list(CONFIGS))
    p.add_argument("--backend", default="accl", choices=["accl", "gloo", "nccl", "mpi"])
    p.add_argument("--corpus", nargs="*", help="text files: one sentence per line, blank line between documents")
    p.add_argument("--vocab", help="WordPiece vocab.txt (built from the corpus when not given)")
    p.add_argument("--vocab-size", type=int, default=8000, help="size of a vocab built from the corpus")
    p.add_argument("--data-dir", default=os.path.join(HERE, "data"), help="where the default corpus and built vocab go")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=8, help="sequences per rank per micro-batch")
    p.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps (total, including resumed ones)")
    p.add_argument("--lr", type=float, default=None, help="peak learning rate (default by config)")
    p.add_argument("--warmup", type=int, default=10, help="linear warm-up steps")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--checkpoint", help="file to save to (every --save-every steps and at the end)")
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--resume", action="store_true", help="continue from --checkpoint")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads per rank (0: cores / local ranks)")
    p.add_argument("--timeout", type=float, default=600, help="collective timeout in seconds")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto: cuda when torch sees a GPU (each rank takes GPU LOCAL_RANK), else cpu")
    p.add_argument("--amp", default="auto", choices=["auto", "bf16", "fp16", "off"],
                   help="mixed precision on cuda (auto: bf16 where the GPU has it, else fp16 with loss scaling); "
                        "cpu runs in float32")
    return p.parse_args()


def log(*a):
    if int(os.environ.get("RANK", "0")) == 0:
        print(*a, flush=True)


def default_corpus(data_dir):
    path = os.path.join(data_dir, "kjv.txt")
    if os.path.exists(path):
        return path
    if not shutil.which("bible"):
        sys.exit("pretrain.py: no --corpus given and the default corpus needs Debian's bible-kjv "
                 "package (apt-get install bible-kjv), or pass --corpus FILE...")
    text = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, text=True, check=True).stdout
    os.makedirs(data_dir, exist_ok=True)
    tmp = path + f".tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        chapter = None
        for line in text.splitlines():
            ref, _, verse = line.partition(" ")
            ch = ref.split(":")[0]
            if chapter is not None and ch != chapter:
                f.write("\n")  # a chapter is a document
            chapter = ch
            if verse.strip():
                f.write(verse.strip() + "\n")
    os.replace(tmp, path)
    return path


class CommTimer:
    """DDP comm hook: all-reduces each gradient bucket (averaging, like the
    default hook) and records when each was in flight. comm_share() is the
    part of a step during which at least one bucket was being reduced."""

    def __init__(self, group, world):
        self.group, self.world, self.spans = group, world, []

    def hook(self, state, bucket):
        t0 = time.perf_counter()
        buf = bucket.buffer() if hasattr(bucket, "buffer") else bucket.get_tensor()
        buf.div_(self.world)
        fut = dist.all_reduce(buf, group=self.group, async_op=True).get_future()

        def done(f):
            self.spans.append((t0, time.perf_counter()))
            return f.value()[0]
        return fut.then(done)

    def take(self):
        spans, self.spans = sorted(self.spans), []
        total, end = 0.0, None
        for a, b in spans:
            if end is None or a > end:
                total += b - a
                end = b
            elif b > end:
                total += b - end
                end = b
        return total


def make_scaler(enabled):
    """Loss scaling for fp16 (a no-op otherwise), on torch 1.13 and 2.x."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def progress(step, total, width=24):
    k = int(width * step / max(total, 1))
    return "[" + "#" * k + "." * (width - k) + "]"


def main():
    args = parse_args()
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    threads = args.threads or max(1, (os.cpu_count() or 1) // local_world)
    torch.set_num_threads(threads)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    use_cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    if use_cuda:
        if not torch.cuda.is_available():
            sys.exit("pretrain.py: --device cuda, but torch sees no GPU (torch.cuda.is_available() is False)")
        if local_rank >= torch.cuda.device_count():
            sys.exit(f"pretrain.py: LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) visible; "
                     "start one rank per GPU (torchrun --nproc-per-node = GPUs per node)")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        if args.backend == "nccl":
            sys.exit("pretrain.py: --backend nccl needs GPUs (--device cuda); on CPU use accl, gloo or mpi")
        device = torch.device("cpu")
    amp = args.amp
    if not use_cuda:
        amp = "off"
    elif amp == "auto":
        amp = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    scaler = make_scaler(amp == "fp16")
    if args.backend == "accl":
        import torch_accl  # noqa: F401  registers backend "accl"
    if "MASTER_ADDR" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29577")
    dist.init_process_group(args.backend, rank=rank, world_size=world, timeout=timedelta(seconds=args.timeout))

    # Data and vocab (rank 0 prepares files, the others wait).
    if rank == 0:
        corpus = args.corpus or [default_corpus(args.data_dir)]
    dist.barrier()
    corpus = args.corpus or [default_corpus(args.data_dir)]
    docs = read_documents(corpus)
    vocab_path = args.vocab or os.path.join(args.data_dir, f"vocab-{os.path.basename(corpus[0])}-{args.vocab_size}.txt")
    if not args.vocab and rank == 0 and not os.path.exists(vocab_path):
        os.makedirs(args.data_dir, exist_ok=True)
        save_vocab(build_vocab((s for d in docs for s in d), args.vocab_size), vocab_path + ".tmp")
        os.replace(vocab_path + ".tmp", vocab_path)
    dist.barrier()
    tok = WordPiece(load_vocab(vocab_path))
    data = PretrainingData(docs, tok, seq_len=args.seq_len, seed=args.seed * 1000 + rank)

    torch.manual_seed(args.seed)  # the same initial weights everywhere (DDP also broadcasts them)
    cfg = make_config(args.config, len(tok.vocab))
    model = BertForPreTraining(cfg).to(device)
    nparams = sum(p.numel() for p in model.parameters())
    lr = args.lr or {"tiny": 1e-3, "mini": 5e-4, "base": 1e-4, "large": 1e-4}[args.config]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    start = 0
    if args.resume:
        if not args.checkpoint or not os.path.exists(args.checkpoint):
            sys.exit(f"pretrain.py: --resume needs an existing --checkpoint (got {args.checkpoint})")
        ck = torch.load(args.checkpoint, map_location=device)
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["optim"])
        start = ck["step"]
        log(f"resumed from {args.checkpoint} at step {start}")
    ddp = DDP(model, bucket_cap_mb=25, device_ids=[local_rank] if use_cuda else None)
    timer = CommTimer(None, world)
    ddp.register_comm_hook(None, timer.hook)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + start + 1) / max(1, args.warmup)) * max(0.0, 1 - (s + start) / max(args.steps, 1)))

    log(f"BERT {args.config}: {cfg.layers} layers, hidden {cfg.hidden}, {cfg.heads} heads, "
        f"{nparams / 1e6:.1f}M parameters, vocab {len(tok.vocab)}; {world} rank(s), backend {args.backend}, "
        f"batch {args.batch_size} x {args.grad_accum} accumulation x {world} ranks, seq {args.seq_len}, "
        f"{threads} thread(s) per rank, device {device.type}" + (f", amp {amp}" if use_cuda else "") +
        f"; corpus {', '.join(corpus)} ({len(docs)} documents)")

    def save(step):
        if rank == 0 and args.checkpoint:
            torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": step,
                        "config": args.config, "vocab": vocab_path}, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)
            log(f"checkpoint: {args.checkpoint} (step {step})")

    ddp.train()
    t_log, samples, comm, first_loss, loss_sum, n_sum = time.perf_counter(), 0, 0.0, None, 0.0, 0
    def forward_backward(b):
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp_dtype is not None):
            loss, mlm, nsp = ddp(**b)
        scaler.scale(loss / args.grad_accum).backward()
        return loss, mlm, nsp

    t_run, steps_run = time.perf_counter(), 0
    for step in range(start, args.steps):
        for micro in range(args.grad_accum):
            b = {k: v.to(device, non_blocking=True) for k, v in data.batch(args.batch_size).items()}
            if micro < args.grad_accum - 1:
                with ddp.no_sync():
                    loss, mlm, nsp = forward_backward(b)
            else:
                loss, mlm, nsp = forward_backward(b)
            samples += args.batch_size * world
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        sched.step()
        steps_run += 1
        if steps_run == 1:
            t_first = time.perf_counter()  # steady state: the steps after the first
        opt.zero_grad(set_to_none=True)
        comm += timer.take()
        lv = loss.item()
        first_loss = lv if first_loss is None else first_loss
        loss_sum, n_sum = loss_sum + lv, n_sum + 1
        done = step + 1
        if done % args.log_every == 0 or done == args.steps:
            dt = time.perf_counter() - t_log
            log(f"step {done:>5}/{args.steps} {progress(done, args.steps)} loss {loss_sum / n_sum:7.4f} "
                f"(mlm {mlm.item():.3f} nsp {nsp.item():.3f})  {samples / dt:8.1f} samples/s  "
                f"comm {100 * comm / dt:4.1f}% of step time  lr {sched.get_last_lr()[0]:.2e}")
            t_log, samples, comm, loss_sum, n_sum = time.perf_counter(), 0, 0.0, 0.0, 0
        if args.save_every and done % args.save_every == 0:
            save(done)
    save(args.steps)
    t_end = time.perf_counter()
    per_step = (t_end - t_run) / max(steps_run, 1)
    steady = f" ({(t_end - t_first) / (steps_run - 1):.2f} s after the first)" if steps_run > 1 else ""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    gpu = f", peak GPU memory {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB" if use_cuda else ""
    log(f"done: first loss {first_loss:.4f}, last loss {lv:.4f}; {per_step:.2f} s per step{steady}, "
        f"peak RSS {rss:.0f} MiB (rank 0){gpu}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
