"""``cachekit tune``: fine-tune the packaged embedder on labelled pairs, as a small adapter.

What it does, in order (``docs/tuning.md``):

1. Split the pairs into ``train`` / ``tune`` / ``test`` parts that share no text
   (:func:`~cachekit.semantic.policy.pairs.component_parts`).
2. Mine a hard negative for every duplicate of the train part the way a cache is offered one:
   the base model's nearest other text that is not known to be a duplicate (a labelled
   non-duplicate of the same query first).
3. Train a low-rank adapter (LoRA, the base weights frozen: the guard against forgetting) with
   two losses each step: multiple-negatives ranking on (query, duplicate, hard negative) and
   online contrastive on labelled pairs.
4. Choose the operating point on the ``tune`` part (the lowest threshold at which
   ``target_precision`` of the hits the labels can judge are right, through the slot guard) and
   measure base and tuned on the ``test`` part, which nothing else reads.
5. Write the adapter and ``tune.json`` (:mod:`cachekit.semantic.embed.adapter` loads them).

Safe to stop: a checkpoint is written every ``checkpoint_every`` steps and on Ctrl-C, and the same
command resumes from it. Deterministic for a seed on one machine. Uses a GPU when torch sees one.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from cachekit.semantic.embed.adapter import (
    ADAPTER_FILE,
    FORMAT,
    MANIFEST,
    base_fingerprint,
    base_model_path,
    file_sha256,
)
from cachekit.semantic.embed.embedder import DEFAULT_MODEL_NAME
from cachekit.semantic.policy.hit_policy import DEFAULT_NUMBER_BONUS
from cachekit.semantic.policy.pairs import (
    LabelledPair,
    average_precision,
    cache_protocol,
    component_parts,
    latest_labels,
    precision_at_recall,
    read_pairs,
)
from cachekit.semantic.policy.slots import DEFAULT_GUARD, same_numbers
from cachekit.semantic.train.settings import TuneConfig
from cachekit.semantic.train.verdict import PRECISION_TERMS, verdict

__all__ = [
    "TuneConfig",
    "TuneResult",
    "embed_with",
    "measure",
    "mine_negatives",
    "operating_point",
    "parse_evals",
    "read_pair_files",
    "recalibrate",
    "run_tune",
    "through_cache",
    "tune",
]

CHECKPOINT_DIR = ".checkpoint"
#: Seconds between progress lines when there is no progress bar (``--no-progress``).
HEARTBEAT_S = 60.0
#: Thresholds searched for the operating point.
GRID = [round(0.50 + 0.005 * i, 3) for i in range(100)]
#: A mined neighbour this close to the query is likelier an unlabelled duplicate than a negative.
MINE_CEILING = 0.95
MINE_K = 8


@dataclass
class TuneResult:
    """What :func:`tune` did. ``held_back``: the ``tune`` part (kept out of training, where the
    operating point was chosen), for whatever is calibrated on the tuned vectors next (the
    verifier)."""

    out: Path
    manifest: dict[str, Any]
    steps_done: int
    seconds: float
    resumed_from: int = 0
    log: list[str] = field(default_factory=list)
    held_back: list[LabelledPair] = field(default_factory=list)


# ---------------------------------------------------------------------------- data


def _training_parts(
    pairs: Sequence[LabelledPair], config: TuneConfig
) -> dict[str, list[LabelledPair]]:
    rows = list(pairs)
    if config.max_pairs is not None:
        rng = random.Random(config.seed)
        rows = sorted(rng.sample(rows, min(config.max_pairs, len(rows))), key=lambda p: p.line)
    parts = component_parts(rows, config.held_back)
    train = parts["train"]
    dups = sum(p.duplicate for p in train)
    if dups < 2 or len(train) - dups < 2:
        raise ValueError("need at least 2 duplicates and 2 non-duplicates among training pairs")
    if not any(p.duplicate for p in parts["tune"]):
        raise ValueError("no duplicates in the held-back tune part: give more pairs")
    return parts


def embed_with(model: Any, texts: Sequence[str], batch_size: int = 128) -> dict[str, np.ndarray]:
    """Unit vectors of ``texts`` (distinct) from a ``SentenceTransformer``, by text."""
    unique = list(dict.fromkeys(texts))
    if not unique:
        return {}
    vectors = model.encode(
        unique,
        batch_size=batch_size,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    return dict(zip(unique, np.asarray(vectors, dtype=np.float32), strict=True))


def mine_negatives(
    train: Sequence[LabelledPair], vectors: dict[str, np.ndarray], seed: int = 0
) -> list[str]:
    """A hard negative for each duplicate of ``train`` (in order): a labelled non-duplicate
    of its query if there is one, else the nearest other text of the part (by ``vectors``) that
    is not labelled its duplicate and is below :data:`MINE_CEILING`, else a random text."""
    import faiss

    texts = list(dict.fromkeys(t for p in train for t in (p.query, p.cached)))
    known_dup: dict[str, set[str]] = {}
    labelled_neg: dict[str, list[str]] = {}
    for p in train:
        if p.duplicate:
            known_dup.setdefault(p.query, set()).add(p.cached)
            known_dup.setdefault(p.cached, set()).add(p.query)
        else:
            labelled_neg.setdefault(p.query, []).append(p.cached)
    dups = [p for p in train if p.duplicate]
    matrix = np.stack([vectors[t] for t in texts])
    index = faiss.IndexFlatIP(matrix.shape[1])
    index.add(matrix)
    sims, ids = index.search(np.stack([vectors[p.query] for p in dups]), MINE_K)
    rng = random.Random(seed)
    out = []
    for p, row_sims, row_ids in zip(dups, sims, ids, strict=True):
        if p.query in labelled_neg:
            out.append(labelled_neg[p.query][0])
            continue
        banned = (
            {p.query, p.cached} | known_dup.get(p.query, set()) | known_dup.get(p.cached, set())
        )
        pick = next(
            (
                texts[j]
                for s, j in zip(row_sims, row_ids, strict=True)
                if j >= 0 and s < MINE_CEILING and texts[j] not in banned
            ),
            None,
        )
        out.append(pick if pick is not None else texts[rng.randrange(len(texts))])
    return out


# ---------------------------------------------------------------------------- evaluation


def _nearest(
    pairs: Sequence[LabelledPair], vectors: dict[str, np.ndarray]
) -> list[tuple[float, str]]:
    """Each query's nearest stored text, every distinct cached text of ``pairs`` stored:
    ``(similarity, text)``."""
    import faiss

    texts = list(dict.fromkeys(p.cached for p in pairs))
    index = faiss.IndexFlatIP(len(next(iter(vectors.values()))))
    index.add(np.stack([vectors[t] for t in texts]))
    sims, ids = index.search(np.stack([vectors[p.query] for p in pairs]), 1)
    return [(float(s), texts[i]) for s, i in zip(sims[:, 0], ids[:, 0], strict=True)]


def measure(pairs: Sequence[LabelledPair], vectors: dict[str, np.ndarray]) -> dict[str, Any]:
    """Both protocols on ``pairs``: own-pair AP and precision at recall 0.70 / 0.90, and the
    through-the-cache nearest neighbours (for :func:`operating_point`)."""
    own = np.array([float(vectors[p.query] @ vectors[p.cached]) for p in pairs])
    dup = np.array([p.duplicate for p in pairs])
    return {
        "pairs": len(pairs),
        "duplicates": int(dup.sum()),
        "own_pair_ap": round(average_precision(own, dup), 4),
        "own_pair_p_at_r70": round(precision_at_recall(own, dup, 0.70), 4),
        "own_pair_p_at_r90": round(precision_at_recall(own, dup, 0.90), 4),
    }


def _through_policy(
    pairs: Sequence[LabelledPair], vectors: dict[str, np.ndarray]
) -> tuple[list[tuple[float, str]], list[bool]]:
    """Each query's nearest entry as the default policy sees it: its similarity raised by the
    number bonus where the numbers match (the policy lowers the bar instead), and whether the
    slot guard lets it through."""
    nearest = _nearest(pairs, vectors)
    seen = []
    served = []
    for p, (sim, text) in zip(pairs, nearest, strict=True):
        bonus = DEFAULT_NUMBER_BONUS if same_numbers(p.query, text) else 0.0
        seen.append((sim + bonus, text))
        served.append(DEFAULT_GUARD.check(p.query, text) is None)
    return seen, served


def operating_point(
    pairs: Sequence[LabelledPair], vectors: dict[str, np.ndarray], target_precision: float
) -> tuple[float, dict[str, float]]:
    """The lowest threshold on :data:`GRID` at which ``target_precision`` of the hits the labels
    can judge are right, through the cache and the default policy (slot guard, number bonus);
    the grid's top if none."""
    nearest, served = _through_policy(pairs, vectors)
    chosen = cache_protocol(pairs, nearest, GRID[-1], served)
    for t in GRID:
        s = cache_protocol(pairs, nearest, t, served)
        if s.hits >= 20 and s.labelled_precision >= target_precision:
            chosen = s
            break
    return chosen.threshold, chosen.as_dict()


def through_cache(
    pairs: Sequence[LabelledPair], vectors: dict[str, np.ndarray], threshold: float
) -> dict[str, float]:
    """Through-the-cache figures of the default policy at ``threshold``."""
    nearest, served = _through_policy(pairs, vectors)
    return cache_protocol(pairs, nearest, threshold, served).as_dict()


# ---------------------------------------------------------------------------- training


def _fingerprint(pairs: Sequence[LabelledPair], config: TuneConfig) -> str:
    digest = hashlib.sha256(json.dumps(asdict(config), sort_keys=True).encode())
    for p in pairs:
        digest.update(f"{p.query}\x1f{p.cached}\x1f{int(p.duplicate)}\n".encode("utf-8", "replace"))
    return digest.hexdigest()[:16]


class _Trainer:
    """One tune's model, losses, optimiser and batch schedule (all fixed by the seed)."""

    def __init__(self, config: TuneConfig, device: str) -> None:
        import torch
        from peft import LoraConfig, get_peft_model
        from sentence_transformers import SentenceTransformer
        from sentence_transformers.sentence_transformer import losses

        self.config = config
        self.device = device
        torch.manual_seed(config.seed)
        model = SentenceTransformer(str(base_model_path()), device=device, backend="torch")
        model.max_seq_length = config.max_seq_length
        lora = LoraConfig(
            r=config.rank,
            lora_alpha=config.alpha,
            lora_dropout=0.0,
            target_modules=["query", "key", "value", "dense"],
        )
        # The Transformer module calls `.model`; `auto_model` is a read-only alias of it.
        model[0].model = get_peft_model(model[0].model, lora)
        self.model = model
        self.ranking = losses.MultipleNegativesRankingLoss(model)
        self.contrastive = losses.OnlineContrastiveLoss(model)
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.01)
        warm = max(1, int(config.steps * config.warmup))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda s: min(
                (s + 1) / warm, max(0.0, (config.steps - s) / max(1, config.steps - warm))
            ),
        )

    def features(self, texts: Sequence[str]) -> dict[str, Any]:
        # `preprocess` is the newer name of `tokenize`; the batch may hold non-tensors.
        prepare = getattr(self.model, "preprocess", None) or self.model.tokenize
        batch = prepare(list(texts))
        return {k: v.to(self.device) if hasattr(v, "to") else v for k, v in batch.items()}

    def step(
        self, triplets: Sequence[tuple[str, str, str]], labelled: Sequence[LabelledPair]
    ) -> float:
        import torch

        self.model.train()
        anchors, positives, negatives = zip(*triplets, strict=True)
        loss = self.ranking(
            [self.features(anchors), self.features(positives), self.features(negatives)],
            torch.empty(0),
        )
        labels = torch.tensor([float(p.duplicate) for p in labelled], device=self.device)
        loss = loss + self.contrastive(
            [
                self.features([p.query for p in labelled]),
                self.features([p.cached for p in labelled]),
            ],
            labels,
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach())

    def save_adapter(self, directory: Path) -> None:
        card = directory / "README.md"
        had_card = card.exists()
        self.model[0].model.save_pretrained(str(directory))
        if not had_card:  # peft's blank Hub model card: tune.json describes this adapter
            card.unlink(missing_ok=True)

    def state(self, step: int) -> dict[str, Any]:
        import torch
        from peft import get_peft_model_state_dict

        return {
            "step": step,
            "adapter": get_peft_model_state_dict(self.model[0].model),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "torch_rng": torch.get_rng_state(),
        }

    def restore(self, state: dict[str, Any]) -> int:
        import torch
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.model[0].model, state["adapter"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        return int(state["step"])


def _schedule(n: int, batch: int, steps: int, rng: random.Random) -> list[list[int]]:
    """``steps`` batches of indexes into ``n`` items: shuffled epochs, no repeat within one."""
    out: list[list[int]] = []
    order: list[int] = []
    while len(out) < steps:
        if len(order) < batch:
            fresh = list(range(n))
            rng.shuffle(fresh)
            order += fresh
        out.append(order[:batch])
        del order[:batch]
    return out


def _save_checkpoint(trainer: _Trainer, step: int, fingerprint: str, directory: Path) -> None:
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    state = trainer.state(step)
    state["fingerprint"] = fingerprint
    tmp = directory / "state.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, directory / "state.pt")


def _load_checkpoint(directory: Path, fingerprint: str) -> dict[str, Any] | None:
    import torch

    path = directory / "state.pt"
    if not path.is_file():
        return None
    state: dict[str, Any] = torch.load(path, weights_only=False)
    return state if state.get("fingerprint") == fingerprint else None


def tune(
    pairs: str | Path | Sequence[LabelledPair],
    out: str | Path,
    config: TuneConfig | None = None,
    *,
    log: Callable[[str], None] = print,
    progress: bool = True,
    extra_eval: Mapping[str, Sequence[LabelledPair]] | None = None,
) -> TuneResult:
    """Tune the packaged embedder on ``pairs`` (a JSON-lines path or :class:`LabelledPair` s)
    and write the adapter and ``tune.json`` into ``out``. ``extra_eval``: more labelled sets
    (by name) measured for base and tuned and recorded in the manifest, never trained on."""
    import torch

    config = config or TuneConfig()
    started = time.perf_counter()
    rows = read_pairs(pairs) if isinstance(pairs, (str, Path)) else list(pairs)
    parts = _training_parts(rows, config)
    train = parts["train"]
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    if config.threads:
        torch.set_num_threads(config.threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    log(
        f"pairs: {len(train)} train, {len(parts['tune'])} tune, {len(parts['test'])} test "
        f"(no text shared between parts); device {device}"
    )
    trainer = _Trainer(config, device)
    fingerprint = _fingerprint(rows, config)
    ckpt_dir = out_dir / CHECKPOINT_DIR
    state = _load_checkpoint(ckpt_dir, fingerprint)

    t0 = time.perf_counter()
    base_vec = _base_vectors(trainer, train)
    log(f"embedded {len(base_vec)} training texts with the base in {time.perf_counter() - t0:.0f}s")
    negatives = mine_negatives(train, base_vec, config.seed)
    dups = [p for p in train if p.duplicate]
    triplets = [(p.query, p.cached, n) for p, n in zip(dups, negatives, strict=True)]
    rng = random.Random(config.seed)
    rank_batches = _schedule(
        len(triplets), min(config.batch_size, len(triplets)), config.steps, rng
    )
    pair_batches = _schedule(len(train), min(config.batch_size, len(train)), config.steps, rng)

    first = trainer.restore(state) if state is not None else 0
    if first:
        log(f"resuming from the checkpoint at step {first} of {config.steps}")
    done = _train_loop(
        trainer,
        triplets,
        train,
        rank_batches,
        pair_batches,
        first,
        fingerprint,
        ckpt_dir,
        log,
        progress,
    )
    if done < config.steps:
        return TuneResult(out_dir, {}, done, time.perf_counter() - started, first)  # stopped

    manifest = _finish(trainer, parts, base_vec, config, out_dir, rows, extra_eval, log)
    manifest["seconds"] = round(time.perf_counter() - started, 1)
    found = verdict(manifest["figures"], manifest["operating_point"], GRID[0])
    manifest["verdict"] = found
    log(PRECISION_TERMS)
    use = {True: "use it", False: "do not use it", None: "no verdict"}[found["use"]]
    log(f"verdict: {use}: {found['why']}")
    _write_manifest(out_dir, manifest)
    shutil.rmtree(ckpt_dir, ignore_errors=True)
    log(f"wrote {out_dir} ({(out_dir / ADAPTER_FILE).stat().st_size / 1e6:.1f} MB adapter)")
    return TuneResult(out_dir, manifest, done, manifest["seconds"], first, held_back=parts["tune"])


def _write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """``tune.json``, replaced whole: a loader never reads half of one."""
    tmp = directory / f"{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, directory / MANIFEST)


def _base_vectors(trainer: _Trainer, train: Sequence[LabelledPair]) -> dict[str, np.ndarray]:
    model = trainer.model[0].model
    with model.disable_adapter():
        return embed_with(trainer.model, [t for p in train for t in (p.query, p.cached)])


def _train_loop(
    trainer: _Trainer,
    triplets: list[tuple[str, str, str]],
    train: list[LabelledPair],
    rank_batches: list[list[int]],
    pair_batches: list[list[int]],
    first: int,
    fingerprint: str,
    ckpt_dir: Path,
    log: Callable[[str], None],
    progress: bool,
) -> int:
    """Run steps ``first`` .. end; returns the steps done (fewer when stopped by Ctrl-C, with a
    checkpoint written)."""
    from tqdm.auto import tqdm

    steps = len(rank_batches)
    bar = tqdm(total=steps, initial=first, disable=not progress, desc="tune", unit="step")
    done = first
    t0 = said = time.perf_counter()
    try:
        for step in range(first, steps):
            loss = trainer.step(
                [triplets[i] for i in rank_batches[step]], [train[i] for i in pair_batches[step]]
            )
            done = step + 1
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}")
            now = time.perf_counter()
            if done == first + 3 or (not progress and now - said >= HEARTBEAT_S):
                per = (now - t0) / (done - first)
                left = f"about {per * (steps - done) / 60:.0f} min left ({per:.1f}s a step)"
                log(left if done == first + 3 else f"step {done}/{steps}, loss {loss:.3f}: {left}")
                said = now
            if done % trainer.config.checkpoint_every == 0 and done < steps:
                _save_checkpoint(trainer, done, fingerprint, ckpt_dir)
    except KeyboardInterrupt:
        _save_checkpoint(trainer, done, fingerprint, ckpt_dir)
        log(f"stopped after step {done}; run the same command again to resume")
    finally:
        bar.close()
    return done


def _finish(
    trainer: _Trainer,
    parts: dict[str, list[LabelledPair]],
    base_vec: dict[str, np.ndarray],
    config: TuneConfig,
    out_dir: Path,
    rows: Sequence[LabelledPair],
    extra_eval: Mapping[str, Sequence[LabelledPair]] | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Save the adapter, choose the operating point on ``tune``, measure on ``test``."""
    trainer.model.eval()
    trainer.save_adapter(out_dir)
    model = trainer.model
    peft_model = model[0].model
    sets = {"tune": parts["tune"], "test": parts["test"], **(extra_eval or {})}
    texts = [t for ps in sets.values() for p in ps for t in (p.query, p.cached)]
    tuned_vec = embed_with(model, texts)
    with peft_model.disable_adapter():
        base_vec = embed_with(model, texts)
    point, at = operating_point(parts["tune"], tuned_vec, config.target_precision)
    base_point, base_at = operating_point(parts["tune"], base_vec, config.target_precision)
    figures: dict[str, Any] = {}
    for name, ps in sets.items():
        if not ps:
            continue
        figures[name] = {
            "base": {**measure(ps, base_vec), "cache": through_cache(ps, base_vec, base_point)},
            "tuned": {**measure(ps, tuned_vec), "cache": through_cache(ps, tuned_vec, point)},
        }
        b, t = figures[name]["base"], figures[name]["tuned"]
        log(
            f"{name}: own-pair AP base {b['own_pair_ap']:.3f} -> tuned {t['own_pair_ap']:.3f}; "
            f"P@R0.90 {b['own_pair_p_at_r90']:.3f} -> {t['own_pair_p_at_r90']:.3f}; "
            f"through the cache P/R {b['cache']['precision']:.3f}/{b['cache']['recall']:.3f} -> "
            f"{t['cache']['precision']:.3f}/{t['cache']['recall']:.3f}"
        )
    log(f"operating point {point:.3f} (base {base_point:.3f}) on the tune part: {at}")
    return {
        "format": FORMAT,
        "base": DEFAULT_MODEL_NAME,
        "base_fingerprint": base_fingerprint(),
        "adapter_sha256": file_sha256(out_dir / ADAPTER_FILE),
        "operating_point": point,
        "base_operating_point": base_point,
        "target_precision": config.target_precision,
        "operating_point_at": at,
        "base_operating_point_at": base_at,
        "config": asdict(config),
        "pairs": {k: len(v) for k, v in parts.items()},
        "pairs_fingerprint": _fingerprint(rows, config),
        "figures": figures,
        "torch": _torch_version(),
        "device": trainer.device,
    }


def _torch_version() -> str:
    import torch

    return str(torch.__version__)


def recalibrate(
    tune_dir: str | Path,
    pairs: Sequence[LabelledPair],
    target_precision: float = 0.80,
    *,
    log: Callable[[str], None] = print,
) -> float:
    """Choose the operating point of the tune in ``tune_dir`` again, on ``pairs`` (labelled pairs
    its adapter never trained on: a team's own traffic, say), with the rule :func:`tune` uses, and
    store it in its ``tune.json`` (earlier points are kept under ``previous_operating_points``).
    The adapter, and so the embedder's name and its entries, are unchanged. Returns the point."""
    from cachekit.semantic.embed.adapter import load_embedder, read_manifest

    if not 0 < target_precision < 1:
        raise ValueError(f"target_precision must be in (0, 1), got {target_precision!r}")
    if not any(p.duplicate for p in pairs):
        raise ValueError("recalibrating needs duplicates among the pairs")
    manifest = read_manifest(tune_dir)
    embedder = load_embedder(tune_dir)
    texts = list(dict.fromkeys(t for p in pairs for t in (p.query, p.cached)))
    vectors = dict(zip(texts, embedder.embed(texts), strict=True))
    point, at = operating_point(pairs, vectors, target_precision)
    previous = {k: manifest.get(k) for k in ("operating_point", "operating_point_at")}
    manifest.setdefault("previous_operating_points", []).append(previous)
    manifest.update(
        operating_point=point,
        operating_point_at=at,
        target_precision=target_precision,
        recalibrated_on_pairs=len(pairs),
    )
    _write_manifest(Path(tune_dir), manifest)
    log(f"operating point {previous['operating_point']} -> {point:.3f} on {len(pairs)} pairs: {at}")
    return point


def read_pair_files(paths: Sequence[str | Path]) -> list[LabelledPair]:
    """The pairs of several files as one list (lines renumbered, repeats of a (query, cached)
    pair keep the last label)."""
    rows = ((p.query, p.cached, p.duplicate) for path in paths for p in read_pairs(path))
    latest, _ = latest_labels(rows)
    return [LabelledPair(i, q, c, d) for i, (q, c, d) in enumerate(latest)]


def parse_evals(specs: Sequence[str]) -> dict[str, list[LabelledPair]]:
    """``NAME=PATH`` specs as labelled sets by name."""
    out: dict[str, list[LabelledPair]] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--eval wants NAME=PAIRS, got {spec!r}")
        if name in ("tune", "test"):
            raise ValueError(f"--eval name {name!r} is taken by the held-back parts")
        out[name] = read_pairs(path)
    return out


def run_tune(
    pairs: Sequence[str | Path],
    out: str | Path,
    config: TuneConfig,
    *,
    evals: Sequence[str] = (),
    verifier: bool = False,
    onnx: bool = False,
    progress: bool = True,
    recalibrate_only: bool = False,
) -> int:
    """``cachekit tune``: exit status 0 when the adapter was written (or, with ``recalibrate``,
    the operating point chosen again), 1 when stopped early."""
    rows = read_pair_files(pairs)
    if recalibrate_only:
        recalibrate(out, rows, config.target_precision)
        return 0
    result = tune(rows, out, config, progress=progress, extra_eval=parse_evals(evals))
    if not result.manifest:
        return 1
    if verifier or onnx:
        from cachekit.semantic.embed.adapter import load_embedder

        if onnx:
            for quantize in (None, "int8"):
                emb = load_embedder(out, backend="onnx", quantize=quantize).load()
                print(f"ONNX ready: {emb.name} ({emb.model_folder})")
        if verifier:
            from cachekit.semantic.policy.verifier import train_verifier

            # Only pairs the adapter never trained on: on its training pairs the tuned
            # similarities are better than they will be on traffic, and so would the verifier be.
            train_verifier(result.held_back, out, embedder=load_embedder(out, backend="torch"))
    return 0
