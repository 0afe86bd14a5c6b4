"""Shared helpers for the worker's tests: a loaded Session on the tiny model and an HTTP client for its endpoint."""
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

# One BLAS thread: the tests share 2 cores with others; OpenBLAS's spinning helper threads only slow them down.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PACKAGE_ROOT))
torch.set_num_threads(1)

from lightning_trainer.params import LoadParams  # noqa: E402
from lightning_trainer.schema import parse  # noqa: E402
from lightning_trainer.session import Session  # noqa: E402

TINY = {"kind": "tiny", "config": {"dModel": 64, "layers": 2, "heads": 4, "context": 64}}


def make_session(adapter=None, model_config=None, **load) -> Session:
    """A session with the tiny model loaded; with `checkpoint=` alone, model and adapter come from the checkpoint."""
    session = Session(lambda message: None)
    model = {"kind": "tiny", "config": model_config} if model_config else TINY
    defaults = {} if "checkpoint" in load and adapter is None else {"model": model, "adapter": adapter or {"kind": "full"}}
    session.load(parse(LoadParams, {**defaults, **load}))
    return session


@pytest.fixture
def session():
    s = make_session()
    yield s
    s.close()


def http(url: str, path: str, body=None):
    """(status, headers, raw body text) of a real HTTP request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url + path, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def worker_env() -> dict:
    return {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}


# Qwen2.5's chat template in miniature: system/user/assistant/tool turns, the tools listed in the system turn,
# assistant tool calls as Hermes <tool_call> JSON (what hf.parse_hermes_tool_calls reads back).
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>{% for t in tools %}\n{{ t | tojson }}{% endfor %}"
    "\n</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.content %}{{ m.content }}{% endif %}"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>\n"
    "{\"name\": \"{{ c.function.name }}\", \"arguments\": {{ c.function.arguments | tojson }}}\n</tool_call>"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def hf_model_dir(path: Path, arch: str = "qwen2", layers: int = 2) -> str:
    """A Hugging Face model folder made on the spot: a byte-level BPE tokenizer trained on a few lines (no
    download), the chat template above, and a tiny Qwen2 or Llama config (the worker builds random weights)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    corpus = ["user assistant system tool tools hi there what is 3 plus 4", '{"name": "add", "arguments": {"a": 1}}',
              "# Tools <tools> </tools> function parameters type object integer"]
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>",
                                                pad_token="<|endoftext|>")
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<tool_call>", "</tool_call>"]})
    fast.chat_template = CHAT_TEMPLATE
    path.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(path)
    common = dict(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                  eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"), pad_token_id=fast.pad_token_id)
    config = transformers.Qwen2Config(**common) if arch == "qwen2" else transformers.LlamaConfig(**common)
    config.save_pretrained(path)
    return str(path)
