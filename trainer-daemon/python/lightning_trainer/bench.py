"""`python3 -m lightning_trainer.bench [--model tiny|hf] [--device cpu|cuda]`: the worker's speed, printed as one JSON
object (`npm run bench` runs it on the CPU; `--device cuda` is the same measurement on a GPU, in wall seconds).

`tiny` is the built-in policy (full fine-tuning); `hf` a tiny Qwen2 built from a config (random weights, 2 layers ×
64, a BPE tokenizer trained on the spot: `tiny_hf_model_dir`, which the tests use too) with LoRA — it needs
transformers + peft.
* update: one `train` call on 16 transitions × 64 tokens (32 prompt + 32 response; no behaviour logprobs, klCoef
  0, the KL not measured: the GRPO loop's update on most iterations) for each lossType, and dapo's with the KL
  measured (`klSample`: a reference forward over every 8th row, the loop's first, validated and last iterations),
  next to the floor of any update on that batch: one bare forward (logits of the response
  positions only, as the worker computes them), policy-gradient loss, backward and AdamW step in plain torch on a
  copy of the same model; interleaved, median of 7, in CPU seconds of the one-thread worker (a loaded machine's
  waits do not count), with each one's seconds per phase (`Session.train(phases=...)`);
* serving: completion tokens/s through the HTTP endpoint with 1, 8 and 32 concurrent clients (each sends its
  requests one after another on a kept-alive connection; asyncio tasks in a fresh process: serving_clients.py), next
  to the baseline of the same requests (prompts, seeds, max_tokens) as batched generate() calls made directly (no
  HTTP, no JSON), one per round of batch 1, 8 and 32; pairs measured back to back, medians (and the median of the
  pairs' ratios).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

from .generate import Sampling, generate  # noqa: E402
from .params import LoadParams, ServeParams, TrainParams  # noqa: E402
from .policy import compute_precision  # noqa: E402
from .schema import parse  # noqa: E402
from .serving_clients import MAX_TOKENS, request  # noqa: E402
from .session import Session  # noqa: E402
from .train import phase_clock  # noqa: E402

# The update's batch: 16 transitions of 32 prompt + 32 response tokens (ids below 256: valid for both models).
TRANSITIONS = [
    {
        "promptIds": [256 % 250] + [65 + (i + k) % 26 for k in range(31)],
        "responseIds": [97 + (i * k) % 26 for k in range(32)],
        "logprobs": None,
        "advantage": 1.0 if i % 2 else -1.0,
    }
    for i in range(16)
]
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")

# Qwen2.5's chat template in miniature: system/user/assistant/tool turns, the tools listed in the system turn,
# assistant tool calls as Hermes <tool_call> JSON (what hf.parse_hermes_tool_calls reads back).
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}"
    "\n</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n</tool_call>'
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def tiny_hf_model_dir(path: Path, arch: str = "qwen2", layers: int = 2) -> str:
    """A Hugging Face model folder made on the spot: a byte-level BPE tokenizer trained on a few lines (no
    download), the chat template above, and a tiny Qwen2 or Llama config (the worker builds random weights)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    corpus = [
        "user assistant system tool tools hi there what is 3 plus 4",
        '{"name": "add", "arguments": {"a": 1}}',
        "# Tools <tools> </tools> function parameters type object integer",
    ]
    tokenizer.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<tool_call>", "</tool_call>"]})
    fast.chat_template = CHAT_TEMPLATE
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    common = dict(
        vocab_size=len(fast),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.pad_token_id,
    )
    config = transformers.Qwen2Config(**common) if arch == "qwen2" else transformers.LlamaConfig(**common)
    config.save_pretrained(path)
    return str(path)


UPDATE_ROUNDS = 7


def _timed(step, device: torch.device) -> float:
    """On the CPU, CPU seconds (the worker runs one thread there): what the step costs, not how long the loaded machine
    let it wait for a core; on CUDA, wall seconds with the device synchronised. The update's phases are timed the same
    way (train.phase_clock)."""
    clock = phase_clock(device)
    _synchronize(device)
    started = clock()
    step()
    _synchronize(device)
    return clock() - started


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _median_phases(runs: list[dict]) -> dict:
    """Each phase's median over the runs; `other` is the rest of each run's total."""
    names = sorted({name for run in runs for name in run})
    return {name: statistics.median(run.get(name, 0.0) for run in runs) for name in names}


def update_measurements(session: Session) -> dict:
    """The bare step and one update per lossType, interleaved round by round (a noisy machine slows them alike),
    after one warm-up each; medians of UPDATE_ROUNDS, and each one's median seconds per phase."""
    bare_step = _bare_step(session)
    device = session.policy.device
    # The update the GRPO loop makes on most iterations (klCoef 0, the KL not measured), and dapo's that measures it
    # (the loop's first, validated and last iterations: a reference forward over every 8th row), `dapo_kl`.
    batch = {"transitions": TRANSITIONS, "epochs": 1, "minibatch": 16, "microBatch": 16}
    params = {loss: parse(TrainParams, {**batch, "lossType": loss, "klSample": False}) for loss in LOSS_TYPES}
    params["dapo_kl"] = parse(TrainParams, {**batch, "lossType": "dapo", "klSample": True})
    bare_step({})
    for name in params:
        session.train(params[name])
    times: dict[str, list[float]] = {"bare": [], **{name: [] for name in params}}
    phases: dict[str, list[dict]] = {name: [] for name in times}
    for _ in range(UPDATE_ROUNDS):
        for name in times:
            run: dict = {}
            if name == "bare":
                times[name].append(_timed(lambda: bare_step(run), device))  # noqa: B023 (called right here)
            else:
                times[name].append(_timed(lambda: session.train(params[name], phases=run), device))  # noqa: B023
            run["other"] = max(0.0, times[name][-1] - sum(run.values()))
            phases[name].append(run)
    result = {"bareStepSeconds16x64": statistics.median(times["bare"]), "barePhases": _median_phases(phases["bare"])}
    for name in params:
        result[f"updateSeconds16x64_{name}"] = statistics.median(times[name])
        result[f"updatePhases_{name}"] = _median_phases(phases[name])
    return result


def _bare_step(session: Session):
    """One forward + loss + backward + AdamW step on the same batch in plain torch, on a copy of the model: the
    floor of any update on it. Its phases go into the dict it is given."""
    model = copy.deepcopy(session.policy.model).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    device = session.policy.device
    clock = phase_clock(device)
    prompt = len(TRANSITIONS[0]["promptIds"])
    ids = torch.tensor([t["promptIds"] + t["responseIds"] for t in TRANSITIONS], device=device)
    mask = torch.ones_like(ids, dtype=torch.bool)
    positions = torch.arange(ids.shape[1], device=device).expand_as(ids)
    advantages = torch.tensor([t["advantage"] for t in TRANSITIONS], device=device)
    tiny = session.policy.model.__class__.__name__ == "TinyGPT"
    keep = ids.shape[1] - prompt + 1  # logits of the response positions only, as the worker computes them

    def step(phases: dict) -> None:
        started = clock()
        with compute_precision(device):  # as the worker computes (bf16 autocast on CUDA)
            if tiny:
                logits = model(ids, mask, positions, None, keep)[0]
            else:
                logits = model(input_ids=ids, attention_mask=mask.long(), logits_to_keep=keep).logits
        logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, ids[:, prompt:, None]).squeeze(-1)
        loss = -(logprobs.mean(dim=1) * advantages).mean()
        _synchronize(device)
        forward = clock()
        optimizer.zero_grad()
        loss.backward()
        _synchronize(device)
        backward = clock()
        optimizer.step()
        _synchronize(device)
        phases.update(forward=forward - started, backward=backward - forward, step=clock() - backward)

    return step


CONCURRENCY = (1, 8, 32)
SERVED_REQUESTS = 64  # per concurrency: rounds = SERVED_REQUESTS // clients
SERVING_PAIRS = 5


def direct_tokens(session: Session, clients: int, rounds: int) -> int:
    """The baseline: the clients' requests of each round as one batched generate() call; the tokens it made."""
    tokens = 0
    for r in range(rounds):
        requests = [request(c, r) for c in range(clients)]
        prompts = [session.policy.render_prompt(messages, None) for messages, _ in requests]
        outputs = generate(
            session.policy, prompts, [Sampling(max_tokens=MAX_TOKENS, seed=seed) for _, seed in requests]
        )
        tokens += sum(len(o.ids) for o in outputs)
    return tokens


def direct_tokens_per_second(session: Session, clients: int, rounds: int) -> float:
    started = time.perf_counter()
    return direct_tokens(session, clients, rounds) / (time.perf_counter() - started)


def http_tokens_per_second(url: str, clients: int, requests_per_client: int) -> float:
    """The clients run in a process of their own, as agents do (serving_clients.py: started fresh, never forked from
    this one, whose memory the fork would leave copy-on-write for the server to fault on)."""
    package_root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-m", "lightning_trainer.serving_clients", url, str(clients), str(requests_per_client)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the serving clients failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)["tokensPerSecond"]


def serving(session: Session, concurrency=CONCURRENCY) -> dict:
    """Tokens/s through HTTP and of the batched generate() baseline at each concurrency: SERVING_PAIRS pairs
    measured back to back (the machine's load alike for both), medians of each and of the pairs' ratios."""
    url = session.serve(parse(ServeParams, {}))["url"]
    batcher = session.server.batcher
    result = {}
    for clients in concurrency:
        rounds = max(1, SERVED_REQUESTS // clients)
        direct, http = [], []
        pairs = SERVING_PAIRS if clients > 1 else 3
        steps, prefills = batcher.steps, batcher.prefills
        for _ in range(pairs):
            direct.append(direct_tokens_per_second(session, clients, rounds))
            http.append(http_tokens_per_second(url, clients, rounds))
        # How the engine batched the HTTP requests: decoding steps and prefills per served request (generate() of
        # the same requests makes one prefill per round and max_tokens steps at most).
        served = rounds * clients * pairs
        result[f"httpStepsPerRequestConcurrency{clients}"] = (batcher.steps - steps) / served
        result[f"httpPrefillsPerRequestConcurrency{clients}"] = (batcher.prefills - prefills) / served
        result[f"directTokensPerSecondBatch{clients}"] = statistics.median(direct)
        result[f"httpTokensPerSecondConcurrency{clients}"] = statistics.median(http)
        result[f"servingRatioConcurrency{clients}"] = statistics.median(h / d for h, d in zip(http, direct))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=["tiny", "hf"], default="tiny")
    parser.add_argument("--part", choices=["all", "update", "serving"], default="all")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument(
        "--concurrency",
        default=",".join(map(str, CONCURRENCY)),
        help="the serving rows' concurrent clients, comma-separated (default 1,8,32)",
    )
    args = parser.parse_args()
    try:
        concurrency = tuple(int(n) for n in args.concurrency.split(","))
    except ValueError:
        parser.error(f"--concurrency {args.concurrency!r}: give client counts separated by commas, e.g. 8,32")
    if not concurrency or min(concurrency) < 1:
        parser.error(f"--concurrency {args.concurrency!r}: each client count must be 1 or more, e.g. 8,32")
    kind = args.model
    session = Session(lambda _: None)
    if kind == "tiny":
        load = {"model": {"kind": "tiny"}, "adapter": {"kind": "full"}}
    else:
        folder = tiny_hf_model_dir(Path(tempfile.mkdtemp(prefix="lightning-bench-")) / "qwen2")
        load = {"model": {"kind": "hf", "name": folder, "fromConfig": True}, "adapter": {"kind": "lora", "rank": 8}}
    placement = {"device": "cpu", "threads": 1} if args.device == "cpu" else {"device": args.device}
    session.load(parse(LoadParams, {**load, **placement}))
    result = {
        "model": session.policy.name,
        "kind": kind,
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "parameters": sum(p.numel() for p in session.policy.model.parameters()),
    }
    if args.part in ("all", "update"):
        result.update(update_measurements(session))
        result["updateSeconds16x64"] = result["updateSeconds16x64_dapo"]
    if args.part in ("all", "serving"):
        result.update(serving(session, concurrency))
    session.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
