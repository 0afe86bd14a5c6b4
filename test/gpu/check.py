"""Prepared GPU check, end to end through the `lightning` CLI (docs/training.md; the issue "From the demo to a real
fine-tune", item 8). Nothing is downloaded:

1. a Hugging Face model folder is built from a config — Qwen2.5-0.5B's shape, random weights saved with
   `save_pretrained` in bf16 (a user's downloaded model, as far as every loader can tell) — with a byte-level BPE
   tokenizer trained on the spot and a ChatML + tools chat template;
2. `lightning train --model DIR --lora` runs GRPO on it for a few iterations (the daemon, the trainer worker serving
   the policy in bf16 on the GPU, a dependency-free Node agent answering arithmetic questions through
   `OPENAI_BASE_URL`, its reward posted to `$LIGHTNING_URL/reward`), checkpoints under retention;
3. `lightning checkpoints export` writes the newest checkpoint as a PEFT adapter and as a merged model, and a separate
   Python started with `-I` (no project code importable) loads each with stock transformers (+ peft) and generates;
4. the newest checkpoint is served by the trainer worker (as Use Checkpoint serves it) and measured at 1 and 16
   concurrent clients;
5. a bare bf16 matmul and a device copy are timed on the same device, and the update and serving tokens/s are printed
   beside the bounds they give: update ≤ F / (6·N) tokens/s (a forward and backward pass is ~6 FLOPs per parameter
   and token), decoding ≤ F / (2·N) tokens/s (compute-bound, large batches) and ≤ BW / (2 bytes · N) at batch 1
   (every weight read once per token), F the measured matmul FLOP/s, BW the measured copy bandwidth, N the
   parameters.

Every step prints as it happens; at the end a JSON summary and a markdown table. Any failure exits non-zero.

    test/gpu/check.sh                              # a CUDA GPU, torch, transformers, peft, tokenizers, Node ≥ 20
    LIGHTNING_GPU_CHECK_CPU=1 test/gpu/check.sh    # the same steps with a tiny model on the CPU (a dry run)
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "dist" / "cli.js"
CPU = os.environ.get("LIGHTNING_GPU_CHECK_CPU") == "1"
NODE = os.environ.get("NODE", "node")
SIZE = {  # Qwen2.5-0.5B's shape, or a toy one for the CPU dry run
    "hidden_size": 64 if CPU else 896,
    "intermediate_size": 128 if CPU else 4864,
    "num_hidden_layers": 2 if CPU else 24,
    "num_attention_heads": 4 if CPU else 14,
    "num_key_value_heads": 2,
    "max_position_embeddings": 4096 if CPU else 32768,
}
VOCAB = 1000 if CPU else 32000
ITERATIONS = 2 if CPU else 3
TASKS, SAMPLES = (4, 2) if CPU else (16, 4)
MAX_TOKENS = 16 if CPU else 128
CONCURRENCY = (1, 4) if CPU else (1, 16)
STEP_TIMEOUT = 600

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

# The agent: no npm package, only fetch. Its reward varies with the answer (a random model rarely gets the sum), so
# the groups' advantages are not all 0 and every iteration makes a real update.
AGENT = """
const task = JSON.parse(process.env.LIGHTNING_TASK);
const res = await fetch(process.env.OPENAI_BASE_URL + '/chat/completions', {
  method: 'POST',
  headers: { 'content-type': 'application/json', authorization: 'Bearer check' },
  body: JSON.stringify({
    model: 'policy',
    messages: [{ role: 'user', content: `What is ${task.a} + ${task.b}? Answer with the number.` }],
    max_tokens: Number(process.env.CHECK_MAX_TOKENS),
  }),
});
if (!res.ok) throw new Error('chat: ' + res.status + ' ' + (await res.text()));
const text = (await res.json()).choices[0].message.content ?? '';
const reward = text.includes(String(task.a + task.b)) ? 1 : (text.length % 5) / 5;
const posted = await fetch(process.env.LIGHTNING_URL + '/reward', {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ value: reward }),
});
if (!posted.ok) throw new Error('reward: ' + posted.status);
"""

# Loads an export with the stock libraries only (run with -I from an empty folder) and generates greedily.
STOCK = textwrap.dedent("""
    import json, sys, time
    try:
        import lightning_trainer  # noqa: F401
        sys.exit("project code is importable: the check would not be a stock one")
    except ImportError:
        pass
    import torch, transformers
    spec = json.loads(sys.argv[1])
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    if spec["format"] == "peft":
        import peft
        base = transformers.AutoModelForCausalLM.from_pretrained(spec["base"], **{key: dtype})
        model = peft.PeftModel.from_pretrained(base, spec["dir"])
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(spec["dir"], **{key: dtype})
    model = model.to(device).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["dir"])
    tokenizer.padding_side = "left"
    out = {}
    for batch in spec["batches"]:
        texts = [
            tokenizer.apply_chat_template([{"role": "user", "content": f"What is {i} + {i + 1}?"}],
                                          add_generation_prompt=True, tokenize=False)
            for i in range(batch)
        ]
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.no_grad():
            model.generate(**inputs, max_new_tokens=4, do_sample=False, pad_token_id=tokenizer.pad_token_id)
            if device == "cuda":
                torch.cuda.synchronize()
            started = time.perf_counter()
            generated = model.generate(**inputs, max_new_tokens=spec["tokens"], min_new_tokens=spec["tokens"],
                                       do_sample=False, pad_token_id=tokenizer.pad_token_id)
            if device == "cuda":
                torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            logits = model(**inputs).logits
        if not torch.isfinite(logits.float()).all():
            sys.exit("non-finite logits from the loaded export")
        new = generated[:, inputs["input_ids"].shape[1]:]
        out[str(batch)] = {"tokensPerSecond": new.numel() / seconds,
                           "sample": tokenizer.decode(new[0], skip_special_tokens=False)}
    out["parameters"] = sum(p.numel() for p in model.parameters())
    out["dtype"] = str(next(model.parameters()).dtype)
    print(json.dumps(out))
""")


def say(line: str) -> None:
    print(line, flush=True)


def fail(message: str) -> None:
    say(f"GPU CHECK FAILED: {message}")
    sys.exit(1)


def phase(summary: dict, name: str, value) -> None:
    """Record one step's result and print it at once."""
    summary[name] = value
    say(f"[check] {name}: {json.dumps(value)}")


def build_model_dir(target: Path) -> int:
    """A Qwen2 folder as save_pretrained writes one: random weights (bf16 on CUDA), a tokenizer trained on this
    Python's library sources (offline, a few seconds), the chat template. Returns the parameter count."""
    import torch
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
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.float32 if CPU else torch.bfloat16)
    model.save_pretrained(target, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def lightning(work: Path, *args: str, timeout: int = STEP_TIMEOUT) -> str:
    """`node dist/cli.js ARGS` in the check's workspace; its stdout (stderr is relayed as it comes)."""
    say(f"[check] lightning {' '.join(args)}")
    process = subprocess.Popen(
        [NODE, str(CLI), *args],
        cwd=work,
        env={**os.environ, "CHECK_MAX_TOKENS": str(MAX_TOKENS), "OPENAI_BASE_URL": "", "OPENAI_API_BASE": ""},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    relay = threading.Thread(target=lambda: [say(f"[lightning] {line.rstrip()}") for line in process.stderr])
    relay.start()
    try:
        out, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        fail(f"lightning {args[0]} ran past {timeout} s")
    relay.join()
    if process.returncode != 0:
        fail(f"lightning {' '.join(args[:2])} exited with {process.returncode}: {out[-2000:]}")
    return out


def last_json(text: str) -> dict:
    return json.loads(text.strip().splitlines()[-1])


def bare_bounds() -> dict:
    """A bare matmul (bf16 on CUDA, float32 on the CPU) and a device copy, timed on the device the run used."""
    import torch

    device = "cpu" if CPU else "cuda"
    dtype = torch.float32 if CPU else torch.bfloat16
    n = 1024 if CPU else 8192
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    copy = torch.empty(256 * 2**20 // 2 if not CPU else 16 * 2**20 // 4, device=device, dtype=dtype)

    def timed(step, repeats: int) -> float:
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times = []
        for _ in range(3):
            started = time.perf_counter()
            for _ in range(repeats):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
            times.append((time.perf_counter() - started) / repeats)
        return statistics.median(times)

    matmul = timed(lambda: a @ b, 2 if CPU else 20)
    copied = timed(lambda: copy.clone(), 2 if CPU else 20)
    return {
        "matmulFlopsPerSecond": 2 * n**3 / matmul,
        "copyBytesPerSecond": 2 * copy.numel() * copy.element_size() / copied,  # read + write
        "dtype": str(dtype).replace("torch.", ""),
        "device": torch.cuda.get_device_name() if device == "cuda" else "CPU",
    }


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"HTTP {error.code}: {error.read().decode(errors='replace')}") from None


def served_tokens_per_second(checkpoint: str) -> dict:
    """The newest checkpoint served by the trainer worker, as Use Checkpoint serves it, at each concurrency."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "trainer-daemon" / "python")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "lightning_trainer.worker"],
        env=env,
        text=True,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=sys.stdout,
        bufsize=1,
    )
    worker.stdout.readline()  # ready
    calls = iter(range(1, 1_000))

    def call(method: str, params: dict) -> dict:
        worker.stdin.write(
            json.dumps({"type": "request", "id": next(calls), "method": method, "params": params}) + "\n"
        )
        while True:
            message = json.loads(worker.stdout.readline() or "null") or fail(f"the worker exited during {method}")
            if message["type"] == "response":
                if "error" in message:
                    fail(f"{method}: {message['error']['message']}")
                return message["result"]

    call("load", {"checkpoint": checkpoint, "device": "cpu" if CPU else "cuda"})
    url = call("serve", {"maxBatch": 64})["url"]
    rates = {}
    for clients in CONCURRENCY:
        for warm in (True, False):
            counts: list[int] = [0] * clients
            errors: list[Exception] = []

            def client(c: int, rounds: int, counts: list[int] = counts, errors: list[Exception] = errors) -> None:
                try:
                    for r in range(rounds):
                        body = {
                            "messages": [{"role": "user", "content": f"What is {c} + {r}?"}],
                            "max_tokens": MAX_TOKENS,
                            "seed": c * 100 + r,
                            "stop": ["\u0000"],
                        }
                        counts[c] += post(url, body)["usage"]["completion_tokens"]
                except Exception as error:  # reported below, failing the check
                    errors.append(error)

            threads = [threading.Thread(target=client, args=(c, 1 if warm else 2)) for c in range(clients)]
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                fail(f"serving the checkpoint to {clients} clients: {errors[0]!r}")
            if not warm:
                rates[str(clients)] = sum(counts) / (time.perf_counter() - started)
    call("shutdown", {})
    worker.wait(timeout=60)
    return rates


def stock_load(work: Path, spec: dict) -> dict:
    script = work / "stock_check.py"
    script.write_text(STOCK)
    empty = work / "empty"
    empty.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-I", str(script), json.dumps(spec)],
        cwd=empty,
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HF_HUB_OFFLINE": "1"},
    )
    if done.returncode != 0:
        fail(f"stock load of the {spec['format']} export: {done.stderr[-3000:]}")
    return last_json(done.stdout)


def main() -> None:
    summary: dict = {"mode": "cpu-tiny" if CPU else "gpu"}
    if not CLI.exists():
        fail(f"{CLI} is missing: run `npm run build` first (check.sh does)")
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="lightning-gpu-check-"))
    model_dir = work / "model"
    phase(summary, "parameters", build_model_dir(model_dir))
    phase(summary, "buildSeconds", time.perf_counter() - started)

    (work / "agent.mjs").write_text(AGENT)
    tasks = [
        {"id": f"t{i}", "split": "train" if i < TASKS else "val", "a": i, "b": 2 * i + 1}
        for i in range(TASKS + TASKS // 2)
    ]
    (work / "tasks.jsonl").write_text("\n".join(json.dumps(t) for t in tasks) + "\n")
    lightning(work, "dataset", "import", "tasks.jsonl", "--name", "arith")
    device = "cpu" if CPU else "cuda"
    finished = last_json(
        lightning(
            work,
            "train",
            "--model",
            str(model_dir),
            "--lora",
            "--dataset",
            "arith",
            "--iterations",
            str(ITERATIONS),
            "--samples",
            str(SAMPLES),
            "--workers",
            "16",
            "--eval-every",
            str(ITERATIONS),
            "--device",
            device,
            "--python",
            sys.executable,
            "--json",
            "--",
            NODE,
            "agent.mjs",
        )
    )
    run, checkpoints = finished["run"], finished["checkpoints"]
    if run["status"] != "succeeded":
        fail(f"the training run {run['status']}: {run.get('error')}")
    steps = [c for c in checkpoints if c["step"] > 0]
    phase(summary, "checkpoints", [{"step": c["step"], "bytes": c.get("bytes"), **c["metrics"]} for c in steps])
    if not steps or any("tokensPerSecond" not in c["metrics"] for c in steps):
        fail("an iteration without an update (no tokensPerSecond in its metrics)")
    summary["updateTokensPerSecond"] = statistics.median(c["metrics"]["tokensPerSecond"] for c in steps)
    summary["rolloutTokensPerSecond"] = statistics.median(c["metrics"]["rollout/tokensPerSecond"] for c in steps)
    newest = checkpoints[-1]

    exports = {}
    for fmt in ("peft", "merged"):
        out = work / f"export-{fmt}"
        exports[fmt] = last_json(
            lightning(work, "checkpoints", "export", newest["id"], "--format", fmt, "--out", str(out), "--json")
        )
        phase(summary, f"export-{fmt}", {k: exports[fmt][k] for k in ("bytes", "seconds", "files", "baseModel")})
    batches = [1, max(CONCURRENCY)]
    for fmt in ("peft", "merged"):
        spec = {"format": fmt, "dir": exports[fmt]["path"], "base": str(model_dir), "batches": batches}
        phase(summary, f"stock-{fmt}", stock_load(work, {**spec, "tokens": MAX_TOKENS}))

    phase(summary, "servingTokensPerSecond", served_tokens_per_second(newest["path"]))
    phase(summary, "bounds", bare_bounds())
    phase(summary, "totalSeconds", time.perf_counter() - started)
    print(json.dumps(summary))
    print(table(summary))
    shutil.rmtree(work, ignore_errors=True)


def table(s: dict) -> str:
    n = s["parameters"]
    flops, bandwidth = s["bounds"]["matmulFlopsPerSecond"], s["bounds"]["copyBytesPerSecond"]
    weight_bytes = 4 if CPU else 2
    update_bound, decode_bound, batch1_bound = flops / (6 * n), flops / (2 * n), bandwidth / (weight_bytes * n)
    memory = f"BW/{weight_bytes}N bytes"
    many = str(max(CONCURRENCY))

    def row(what: str, measured: float, bound: float, why: str) -> str:
        return f"| {what} | {measured:,.0f} | {bound:,.0f} ({why}) | {measured / bound:.1%} |"

    return "\n".join(
        [
            f"Device: {s['bounds']['device']}; model: Qwen2 from config, {n / 1e6:.3g}M parameters "
            f"({s['stock-merged']['dtype']}), LoRA; bare {s['bounds']['dtype']} matmul {flops / 1e12:.3g} TFLOP/s, "
            f"copy {bandwidth / 1e9:.3g} GB/s.",
            "",
            "| tokens/s | measured | bound | of the bound |",
            "|---|---|---|---|",
            row("update (GRPO, LoRA; median over iterations)", s["updateTokensPerSecond"], update_bound, "F/6N"),
            row(
                "rollouts during training (our engine, agents' time included)",
                s["rolloutTokensPerSecond"],
                decode_bound,
                "F/2N",
            ),
            row("serving the checkpoint, 1 client", s["servingTokensPerSecond"]["1"], batch1_bound, memory),
            row(f"serving the checkpoint, {many} clients", s["servingTokensPerSecond"][many], decode_bound, "F/2N"),
            row(
                "stock transformers, merged export, batch 1",
                s["stock-merged"]["1"]["tokensPerSecond"],
                batch1_bound,
                memory,
            ),
            row(
                f"stock transformers, merged export, batch {many}",
                s["stock-merged"][many]["tokensPerSecond"],
                decode_bound,
                "F/2N",
            ),
            "",
            f"Exports: peft {s['export-peft']['bytes'] / 2**20:.1f} MiB in {s['export-peft']['seconds']:.1f} s, "
            f"merged {s['export-merged']['bytes'] / 2**20:.1f} MiB in {s['export-merged']['seconds']:.1f} s; "
            f"both loaded by stock transformers (+ peft). Total {s['totalSeconds']:.0f} s.",
        ]
    )


if __name__ == "__main__":
    main()
