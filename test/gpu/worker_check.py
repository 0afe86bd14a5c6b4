"""The worker-level GPU probe (run by check.sh after check.py): the trainer worker with a Hugging Face model, no
download needed.

Builds a Qwen2-architecture model from a config with random weights (default: Qwen2.5-0.5B's shape) and a
byte-level BPE tokenizer trained on the fly with a ChatML + tools chat template, then drives the real worker
over its stdio protocol: load with LoRA (peft), serve chat completions (tokens/s at 1 and 16 concurrent
clients, bf16), `train` on 64 transitions × 512 tokens (update time, peak GPU memory, ratio deviation against
the served logprobs), one update per loss type (grpo, bnpo, dr_grpo, dapo with clip-higher, a KL term), save and
resume from the checkpoint. Each phase's result, the worker's progress events and
its stderr are printed (to stdout, flushed) as they happen, so a failure can be read from the log alone; at the end a
JSON summary and a markdown table. Any failure exits non-zero.

    test/gpu/check.sh worker                         # on a machine with a CUDA GPU, torch, transformers and peft
    LIGHTNING_GPU_CHECK_CPU=1 test/gpu/check.sh worker   # the same logic with a tiny config on the CPU
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU = os.environ.get("LIGHTNING_GPU_CHECK_CPU") == "1"
SIZE = {  # Qwen2.5-0.5B's shape, or a toy one for the CPU run
    "hidden_size": 64 if CPU else 896,
    "intermediate_size": 128 if CPU else 4864,
    "num_hidden_layers": 2 if CPU else 24,
    "num_attention_heads": 4 if CPU else 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096 if CPU else 32768,
}
VOCAB = 1000 if CPU else 32000
TRANSITIONS, PROMPT_TOKENS, RESPONSE_TOKENS = (8, 32, 32) if CPU else (64, 256, 256)
CONCURRENCY = (1, 4) if CPU else (1, 16)
VARIANTS = [
    ("grpo", {}),
    ("bnpo", {}),
    ("dr_grpo", {}),
    ("dapo", {"clipHigh": 0.28}),
    ("grpo", {"klCoef": 0.05, "klBiasCorrection": True}),
]
MAX_TOKENS = 32 if CPU else 128

CHAT_TEMPLATE = """{%- if tools %}<|im_start|>system
You may call functions. Signatures:
{%- for tool in tools %}
{{ tool | tojson }}
{%- endfor %}
Answer a call as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>
{% endif %}
{%- for m in messages %}
{%- if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant
{%- for call in m.tool_calls %}
<tool_call>{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}</tool_call>
{%- endfor %}<|im_end|>
{% elif m.role == 'tool' %}<|im_start|>user
<tool_response>{{ m.content }}</tool_response><|im_end|>
{% else %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def say(line: str) -> None:
    print(line, flush=True)


def fail(message: str) -> None:
    say(f"GPU CHECK FAILED: {message}")
    sys.exit(1)


def phase(summary: dict, name: str, value) -> None:
    """Record one phase's result and print it at once."""
    summary[name] = value
    say(f"[check] {name}: {json.dumps(value)}")


def build_model_dir(target: Path) -> None:
    """config.json + a tokenizer trained on this Python's own library sources (offline, a few seconds)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "*.py")))[:200]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    tokenizer.train(
        files,
        trainers.BpeTrainer(
            vocab_size=VOCAB, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(target)
    config = transformers.Qwen2Config(
        vocab_size=len(fast),
        tie_word_embeddings=True,
        rope_theta=1e6,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        **SIZE,
    )
    config.save_pretrained(target)


class Worker:
    """The real worker process, spoken to over its JSON-lines protocol."""

    def __init__(self):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "trainer-daemon" / "python")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lightning_trainer.worker"],
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=1,
        )
        threading.Thread(target=self._relay_stderr, daemon=True).start()
        self.ready = json.loads(self.process.stdout.readline() or fail("the worker printed no ready line"))
        self.next_id = 0

    def _relay_stderr(self) -> None:
        for line in self.process.stderr:
            say(f"[worker] {line.rstrip()}")

    def call(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.process.stdin.write(
            json.dumps({"type": "request", "id": self.next_id, "method": method, "params": params}) + "\n"
        )
        while True:
            line = self.process.stdout.readline() or fail(f"the worker exited during {method}")
            message = json.loads(line)
            if message["type"] == "event":
                say(f"[worker event] {json.dumps(message.get('data', message))}")
            elif message["type"] == "response":
                if "error" in message:
                    fail(
                        f"{method}: {message['error']['kind']}: {message['error']['message']}\n"
                        f"{message['error'].get('traceback', '')}"
                    )
                return message["result"]


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:  # the body names the cause (e.g. non-finite logits)
        raise RuntimeError(f"HTTP {error.code}: {error.read().decode(errors='replace')}") from None


def serving_tokens_per_second(url: str, clients: int, per_client: int) -> float:
    counts, errors = [0] * clients, []

    def client(c: int) -> None:
        try:
            for r in range(per_client):
                body = {
                    "messages": [{"role": "user", "content": f"Question {c}-{r}: what is {c} + {r}?"}],
                    "max_tokens": MAX_TOKENS,
                    "temperature": 1.0,
                    "seed": c * 100 + r,
                    "stop": ["\u0000"],
                }
                counts[c] += post(url, body)["usage"]["completion_tokens"]
        except Exception as error:  # reported below, failing the check
            errors.append(error)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        fail(f"serving with {clients} clients: {errors[0]!r}")
    return sum(counts) / (time.perf_counter() - started)


def main() -> None:
    summary: dict = {"mode": "cpu-tiny" if CPU else "gpu"}
    work = Path(tempfile.mkdtemp(prefix="lightning-gpu-check-"))
    started = time.perf_counter()
    build_model_dir(work / "model")
    phase(summary, "buildSeconds", time.perf_counter() - started)
    worker = Worker()
    phase(summary, "ready", worker.ready)
    if not CPU and worker.ready["device"] != "cuda":
        fail("torch sees no CUDA GPU (set LIGHTNING_GPU_CHECK_CPU=1 to run the CPU variant)")
    load = {
        "model": {"kind": "hf", "name": str(work / "model"), "fromConfig": True},
        "adapter": {"kind": "lora", "rank": 16, "alpha": 32},
        "optimizer": {"lr": 1e-4},
        "seed": 0,
    }
    started = time.perf_counter()
    phase(summary, "load", worker.call("load", load))
    phase(summary, "loadSeconds", time.perf_counter() - started)
    url = worker.call("serve", {"maxBatch": 64})["url"]
    say(f"[check] serving at {url}")

    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
            },
        }
    ]
    probe = post(
        url,
        {
            "messages": [{"role": "user", "content": "add 2 and 3"}],
            "tools": tools,
            "max_tokens": 16,
            "logprobs": True,
            "return_token_ids": True,
            "seed": 1,
        },
    )
    choice = probe["choices"][0]
    if len(choice["token_ids"]) != len(choice["logprobs"]["content"]) or not probe["prompt_token_ids"]:
        fail("served token ids and logprobs disagree")
    tokenized = worker.call("tokenize", {"messages": [{"role": "user", "content": "add 2 and 3"}], "tools": tools})
    if tokenized["ids"] != probe["prompt_token_ids"]:
        fail("prompt_token_ids differ from the chat template's rendering")

    for clients in CONCURRENCY:
        per_client = 4 if clients == 1 else 2
        serving_tokens_per_second(url, clients, 1)  # warm-up (kernels, allocator)
        phase(summary, f"servingTokensPerSecond{clients}", serving_tokens_per_second(url, clients, per_client))

    vocab = json.loads((work / "model" / "config.json").read_text())["vocab_size"]
    transitions = [
        {
            "promptIds": [(i * 31 + k * 7) % vocab for k in range(PROMPT_TOKENS)],
            "responseIds": [(i * 17 + k * 13) % vocab for k in range(RESPONSE_TOKENS)],
            "logprobs": None,
            "advantage": 1.0 if i % 2 else -1.0,
        }
        for i in range(TRANSITIONS)
    ]
    options = {"epochs": 2, "minibatch": TRANSITIONS, "microBatch": 8}
    for name in ("trainFirst", "trainSecond"):
        phase(summary, name, worker.call("train", {"transitions": transitions, **options}))
        if summary[name]["loss"] is None:  # the worker writes NaN/inf as null
            fail(f"{name}: the loss is not finite")
    # every loss type (TRL's names), DAPO's clip-higher and a KL term on the LoRA policy: finite, KL measured
    for loss_type, extra in VARIANTS:
        name = f"train_{loss_type}" + "".join(f"_{k}" for k in extra)
        result = worker.call(
            "train", {"transitions": transitions, **options, "epochs": 1, "lossType": loss_type, **extra}
        )
        phase(summary, name, result)
        if result["loss"] is None or result["kl"] is None or not result["kl"] > 0:
            fail(f"{name}: loss {result['loss']}, KL to the reference {result['kl']} (finite and > 0 expected)")
    # a completion served by the updated weights, trained on with its served logprobs: the ratio must start near 1
    try:
        fresh = post(
            url,
            {
                "messages": [{"role": "user", "content": "add 2 and 3"}],
                "max_tokens": 16,
                "logprobs": True,
                "return_token_ids": True,
                "seed": 2,
            },
        )
    except RuntimeError as error:
        fail(f"a completion after the updates: {error}")
    say(f"[check] completion after the updates: {fresh['choices'][0]['message']}")
    served = {
        "promptIds": fresh["prompt_token_ids"],
        "responseIds": fresh["choices"][0]["token_ids"],
        "logprobs": [e["logprob"] for e in fresh["choices"][0]["logprobs"]["content"]],
        "advantage": 0.0,
    }
    consistency = worker.call("train", {"transitions": [served], "epochs": 1})
    say(f"[check] consistency train: {json.dumps(consistency)}")
    phase(summary, "servedVsTrainingMaxRatioDeviation", consistency["maxRatioDeviation"])
    if not consistency["maxRatioDeviation"] < 0.5:
        fail(f"served logprobs disagree with the trainer's: max |ratio - 1| = {consistency['maxRatioDeviation']}")

    saved = worker.call("save", {"dir": str(work / "checkpoint"), "metrics": {"check": True}})
    phase(summary, "checkpointBytes", saved["bytes"])
    resumed = worker.call("load", {"checkpoint": saved["path"]})
    if resumed["step"] != consistency["step"] or resumed["trainable"] != summary["load"]["trainable"]:
        fail(f"resumed checkpoint differs: {resumed}")
    say(f"[check] resumed: {json.dumps(resumed)}")
    worker.call("shutdown", {})
    if worker.process.wait(timeout=60) != 0:
        fail("the worker did not exit cleanly")
    phase(summary, "totalSeconds", time.perf_counter() - started)
    print(json.dumps(summary))
    print(table(summary))


def table(s: dict) -> str:
    device = (s["ready"].get("cuda") or {}).get("name", "CPU")
    rows = [
        ("device", device),
        ("torch / transformers / peft", f"{s['ready']['torch']} / {s['ready']['transformers']} / {s['ready']['peft']}"),
        ("model", f"Qwen2 from config, {s['load']['parameters'] / 1e6:.1f}M params, {s['load']['dtype']}"),
        ("LoRA trainable params", f"{s['load']['trainable'] / 1e6:.2f}M"),
        *[(f"serving, {c} concurrent (tokens/s)", f"{s[f'servingTokensPerSecond{c}']:.0f}") for c in CONCURRENCY],
        (
            f"update, {TRANSITIONS} × {PROMPT_TOKENS + RESPONSE_TOKENS} tokens, 2 epochs (s)",
            f"{s['trainSecond']['seconds']:.2f} (first call {s['trainFirst']['seconds']:.2f})",
        ),
        *[
            (
                f"update, lossType {t}{' ' + json.dumps(e) if e else ''}, 1 epoch (s)",
                f"{s['train_' + t + ''.join('_' + k for k in e)]['seconds']:.2f}",
            )
            for t, e in VARIANTS
        ],
        ("largest gradient norm in update (before clipping)", f"{s['trainSecond']['gradNorm']:.3g}"),
        ("peak GPU memory in update", f"{(s['trainSecond'].get('gpuMemoryBytes') or 0) / 2**30:.1f} GiB"),
        ("max |ratio - 1|, first minibatch (same weights)", f"{s['trainFirst']['maxRatioDeviation']:.2e}"),
        ("max |ratio - 1|, served vs trainer logprobs", f"{s['servedVsTrainingMaxRatioDeviation']:.2e}"),
        ("checkpoint size", f"{s['checkpointBytes'] / 2**20:.1f} MiB"),
        ("total wall time", f"{s['totalSeconds']:.0f} s"),
    ]
    return "\n".join(["| metric | value |", "|---|---|", *[f"| {k} | {v} |" for k, v in rows]])


if __name__ == "__main__":
    main()
