"""Our policy-gradient loss against TRL's own: the same loss value and the same gradients for every lossType.

One batch of transitions (equal-length prompts, responses of different lengths, environment tokens masked out,
behaviour logprobs off the current policy so ratios are clipped both ways, LoRA adapters moved off zero so the
KL to the reference is not 0) goes through
  * ours: `policy_update` of a LoRA HfPolicy (one epoch, one minibatch split into micro-batches, SGD at lr 0 and no
    gradient clipping, so the parameters' .grad afterwards is the minibatch's gradient and nothing moves);
  * TRL's: `GRPOTrainer._compute_loss` and `_get_per_token_logps_and_entropies` — TRL's code, read unchanged —
    on the same peft model, once per micro-batch as its gradient-accumulation loop calls it, the losses
    backpropagated and summed.
The harness: a full GRPOTrainer needs a dataset, reward functions and a generation loop that this comparison does
not exercise, so `TrlLoss` is a GRPOTrainer made with `__new__` that holds the attributes `GRPOTrainer.__init__`
derives from a real `GRPOConfig` (loss_type, epsilon/epsilon_high, beta, max_completion_length, entropy_coef, …,
copied by the same rules), and a one-process stand-in for accelerate's Accelerator (gather/reduce are identities).
`test_the_harness_sets_what_compute_loss_reads` fails when a TRL release reads an attribute the harness lacks.
"""

import dis

import pytest
import torch
import trl
from conftest import hf_model_dir
from trl import GRPOConfig, GRPOTrainer

from lightning_trainer.params import LoadParams, TrainParams
from lightning_trainer.schema import parse
from lightning_trainer.session import Session
from lightning_trainer.train import policy_update

MICRO_BATCH = 3
PROMPT = 6


class _OneProcess:
    """What _compute_loss uses of accelerate's Accelerator, for a single process."""

    num_processes = 1
    is_main_process = True
    sync_gradients = True

    @staticmethod
    def gather(x):
        return x

    gather_for_metrics = gather

    @staticmethod
    def reduce(x, reduction="sum"):
        return x


def trl_loss(args: GRPOConfig, model, accumulation_steps: int) -> GRPOTrainer:
    trainer = GRPOTrainer.__new__(GRPOTrainer)
    trainer.args = args
    trainer.model = model
    trainer.accelerator = _OneProcess()
    trainer.model_kwarg_keys = set()
    trainer.current_gradient_accumulation_steps = accumulation_steps
    # As GRPOTrainer.__init__ sets them from args:
    trainer.max_completion_length = args.max_completion_length
    trainer.temperature = args.temperature
    trainer.use_vllm = args.use_vllm
    trainer.vllm_importance_sampling_correction = args.vllm_importance_sampling_correction
    trainer.router_aux_loss_coef = args.router_aux_loss_coef
    trainer.loss_type = args.loss_type
    trainer.aux_loss_enabled = False  # not a mixture-of-experts model
    trainer.importance_sampling_level = args.importance_sampling_level
    trainer.off_policy_mask_threshold = args.off_policy_mask_threshold
    trainer.top_entropy_quantile = args.top_entropy_quantile
    trainer.entropy_coef = args.entropy_coef
    trainer.use_adaptive_entropy = args.use_adaptive_entropy
    trainer._entropy_bonus_enabled = trainer.entropy_coef != 0.0 or trainer.use_adaptive_entropy
    trainer._last_world_entropy = float("inf")
    trainer._entropy_window_stats = None
    trainer.epsilon_low = args.epsilon
    trainer.epsilon_high = args.epsilon_high if args.epsilon_high is not None else args.epsilon
    trainer.beta = args.beta
    from collections import defaultdict

    trainer._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return trainer


def _attributes_read(function) -> set[str]:
    """`self.X` names a function reads (its bytecode, nested functions included)."""
    names, codes = set(), [function.__code__]
    while codes:
        code = codes.pop()
        instructions = list(dis.get_instructions(code))
        for a, b in zip(instructions, instructions[1:]):
            if a.argval == "self" and a.opname.startswith("LOAD") and b.opname in ("LOAD_ATTR", "LOAD_METHOD"):
                names.add(b.argval)
        codes += [c for c in code.co_consts if hasattr(c, "co_code")]
    return names


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return hf_model_dir(tmp_path_factory.mktemp("parity") / "qwen")


def _batch(session: Session, generator: torch.Generator) -> list[dict]:
    vocab = session.policy.vocab_size
    pad = session.policy.pad_id
    words = [w for w in range(min(vocab, 300)) if w != pad]
    transitions = []
    for i, length in enumerate([5, 8, 3, 7, 6, 4, 8]):
        pick = lambda n: [words[int(x)] for x in torch.randint(len(words), (n,), generator=generator)]  # noqa: E731
        mask = [1] * length
        if i % 3 == 1:
            mask[1] = mask[2] = 0  # a tool result inside the response: no loss
        transitions.append(
            {
                "promptIds": pick(PROMPT),
                "responseIds": pick(length),
                "mask": mask,
                "advantage": float(torch.randn((), generator=generator)),
            }
        )
    return transitions


def _lora_off_zero(session: Session, generator: torch.Generator) -> None:
    with torch.no_grad():
        for name, p in session.policy.model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.05)


def _trl_inputs(rows: list[dict], logprobs, references, max_length: int, tokens: float) -> dict:
    width = max(len(r["responseIds"]) for r in rows)
    completion = torch.zeros((len(rows), width), dtype=torch.long)
    completion_mask = torch.zeros((len(rows), width), dtype=torch.long)
    tool_mask = torch.zeros((len(rows), width), dtype=torch.long)
    old = torch.zeros((len(rows), width))
    ref = torch.zeros((len(rows), width))
    for i, r in enumerate(rows):
        n = len(r["responseIds"])
        completion[i, :n] = torch.tensor(r["responseIds"])
        completion_mask[i, :n] = 1
        tool_mask[i, :n] = torch.tensor(r["mask"])
        old[i, :n] = torch.tensor(logprobs[id(r)])
        ref[i, :n] = torch.tensor(references[id(r)])
    return {
        "prompt_ids": torch.tensor([r["promptIds"] for r in rows]),
        "prompt_mask": torch.ones((len(rows), PROMPT), dtype=torch.long),
        "completion_ids": completion,
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "advantages": torch.tensor([r["advantage"] for r in rows]),
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": torch.tensor(tokens),
    }


VARIANTS = [
    ("grpo", {}),
    ("bnpo", {}),
    ("dr_grpo", {"maxResponseLength": 10}),
    ("dapo", {"clipHigh": 0.28}),
    ("dapo", {"klCoef": 0.1, "entropyCoef": 0.01}),
    ("grpo", {"klCoef": 0.05, "clip": 0.1, "clipHigh": 0.3}),
    ("bnpo", {"klCoef": 0.1, "klBiasCorrection": False}),  # the others: both sides' default (on)
]


def test_the_harness_sets_what_compute_loss_reads(tmp_path):
    args = GRPOConfig(output_dir=str(tmp_path), report_to=[], bf16=False, use_cpu=True)
    harness = trl_loss(args, torch.nn.Linear(1, 1), 1)
    read = _attributes_read(GRPOTrainer._compute_loss) | _attributes_read(
        GRPOTrainer._get_per_token_logps_and_entropies
    )
    missing = sorted(n for n in read if not hasattr(harness, n))
    # Methods and properties of GRPOTrainer itself are there; the rest must be set by the harness.
    assert missing == [], f"trl {trl.__version__}: GRPOTrainer._compute_loss reads {missing}; extend trl_loss()"


@pytest.mark.parametrize("loss_type,extra", VARIANTS, ids=[f"{t}-{'-'.join(e) or 'plain'}" for t, e in VARIANTS])
def test_loss_and_gradients_match_trl(model_dir, tmp_path, loss_type, extra):
    torch.manual_seed(0)
    session = Session(lambda _: None)
    session.load(
        parse(
            LoadParams,
            {
                "model": {"kind": "hf", "name": model_dir, "fromConfig": True},
                "adapter": {"kind": "lora", "rank": 4, "trainNorms": False},
                "seed": 0,
            },
        )
    )
    generator = torch.Generator().manual_seed(1)
    _lora_off_zero(session, generator)
    rows = _batch(session, generator)
    model = session.policy.model
    trainable = session.policy.trainable()

    # Behaviour logprobs: the current policy's, shifted by noise so that ratios leave [1 - ε, 1 + ε] both ways.
    from lightning_trainer.train import sequence_logprobs

    with torch.no_grad():
        current = sequence_logprobs(session.policy, [r["promptIds"] for r in rows], [r["responseIds"] for r in rows])
        with session.policy.reference() as reference:
            ref = sequence_logprobs(
                session.policy, [r["promptIds"] for r in rows], [r["responseIds"] for r in rows], module=reference
            )
    logprobs, references = {}, {}
    for i, r in enumerate(rows):
        n = len(r["responseIds"])
        noise = torch.randn(n, generator=generator) * 0.3
        logprobs[id(r)] = (current.logprobs[i, -n:] + noise).tolist()
        references[id(r)] = ref.logprobs[i, -n:].tolist()
        r["logprobs"] = logprobs[id(r)]

    # Ours: one epoch, the whole batch one minibatch, micro-batches of MICRO_BATCH.
    params = parse(
        TrainParams,
        {
            "transitions": rows,
            "epochs": 1,
            "minibatch": len(rows),
            "microBatch": MICRO_BATCH,
            "lossType": loss_type,
            "seed": 3,
            **extra,
        },
    )
    model.train()
    frozen = torch.optim.SGD(list(trainable.values()), lr=0.0)
    ours = policy_update(session.policy, frozen, 0.0, params, lambda _: None)
    our_grads = {n: p.grad.detach().clone() for n, p in trainable.items()}
    assert ours["kl"] > 0

    # TRL: the same micro-batches in the same order (policy_update's shuffle), one _compute_loss call each.
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(3)).tolist()
    micro = [order[i : i + MICRO_BATCH] for i in range(0, len(order), MICRO_BATCH)]
    tokens = float(sum(sum(r["mask"]) for r in rows))
    max_length = extra.get("maxResponseLength", max(len(r["responseIds"]) for r in rows))
    args = GRPOConfig(
        output_dir=str(tmp_path),
        report_to=[],
        bf16=False,
        use_cpu=True,
        loss_type=loss_type,
        beta=extra.get("klCoef", 0.0),
        epsilon=extra.get("clip", 0.2),
        epsilon_high=extra.get("clipHigh"),
        temperature=1.0,
        max_completion_length=max_length,
        entropy_coef=extra.get("entropyCoef", 0.0),
        **({"use_bias_correction_kl": extra["klBiasCorrection"]} if "klBiasCorrection" in extra else {}),
        steps_per_generation=len(micro),
        gradient_accumulation_steps=len(micro),
    )
    trainer = trl_loss(args, model, len(micro))
    model.zero_grad(set_to_none=True)
    model.train()
    theirs = 0.0
    for chunk in micro:
        picked = [rows[i] for i in chunk]
        loss = trainer._compute_loss(model, _trl_inputs(picked, logprobs, references, max_length, tokens))
        loss.backward()
        theirs += float(loss.detach())

    assert abs(ours["loss"] - theirs) < 1e-5, (ours["loss"], theirs)
    worst = max(float((our_grads[n] - p.grad).abs().max()) for n, p in trainable.items())
    scale = max(float(p.grad.abs().max()) for p in trainable.values())
    assert scale > 1e-3, "the gradients are ~0: the comparison would prove nothing"
    assert worst < 1e-5, f"{loss_type} {extra}: gradients differ by {worst} (largest gradient {scale})"
    session.close()
