"""Hugging Face policies (runs where transformers + peft are installed; skipped otherwise, e.g. Debian's torch 1.13).

A small Qwen2 model built from a config with random weights and a word-level tokenizer made on the spot: chat
template with tools, Hermes tool-call parsing, served logprobs vs recomputation, LoRA leaves the base untouched."""
import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("peft")

from conftest import http  # noqa: E402
from lightning_trainer.hf import parse_hermes_tool_calls  # noqa: E402
from lightning_trainer.params import LoadParams, ServeParams, TrainParams  # noqa: E402
from lightning_trainer.schema import parse  # noqa: E402
from lightning_trainer.session import Session  # noqa: E402
from lightning_trainer.train import sequence_logprobs  # noqa: E402

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}<|im_end|>\n{% endfor %}"
            "{% if tools %}<|im_start|>tools\n{{ tools | length }}<|im_end|>\n{% endif %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "\n", "user", "assistant", "tools", "hi",
             "there", "1", "2", "3"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(pattern="\n", behavior="isolated")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>",
                                                pad_token="<|endoftext|>", unk_token="<unk>")
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = TEMPLATE
    path = tmp_path_factory.mktemp("qwen")
    fast.save_pretrained(path)
    transformers.Qwen2Config(vocab_size=len(words), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                             eos_token_id=3, pad_token_id=1).save_pretrained(path)
    return str(path)


def test_hermes_tool_calls_are_parsed_only_for_known_tools():
    tools = [{"type": "function", "function": {"name": "add"}}]
    content, calls = parse_hermes_tool_calls('ok <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', tools)
    assert content == "ok" and json.loads(calls[0]["function"]["arguments"]) == {"a": 1}
    assert parse_hermes_tool_calls('<tool_call>{"name": "rm"}</tool_call>', tools)[1] == []


def test_lora_policy_serves_exact_tokens_and_trains_adapters_only(model_dir):
    session = Session(lambda _: None)
    loaded = session.load(parse(LoadParams, {"model": {"kind": "hf", "name": model_dir, "fromConfig": True},
                                             "adapter": {"kind": "lora", "rank": 4, "trainNorms": False}}))
    assert 0 < loaded["trainable"] < loaded["parameters"]
    url = session.serve(parse(ServeParams, {}))["url"]
    status, _, text = http(url, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                         "tools": [{"type": "function", "function": {"name": "f"}}],
                                                         "max_tokens": 8, "logprobs": True, "return_token_ids": True})
    assert status == 200, text
    response = json.loads(text)
    prompt, ids = response["prompt_token_ids"], response["choices"][0]["token_ids"]
    assert prompt == session.policy.render_prompt([{"role": "user", "content": "hi"}], [{"type": "function"}])
    assert 10 in prompt  # the template rendered the tools (their count, "1")
    served = [e["logprob"] for e in response["choices"][0]["logprobs"]["content"]]
    recomputed = sequence_logprobs(session.policy, [prompt], [ids]).logprobs[0, -len(ids):].tolist()
    assert max(abs(a - b) for a, b in zip(served, recomputed)) < 1e-4

    base = {n: p.detach().clone() for n, p in session.policy.model.named_parameters() if "lora_" not in n}
    result = session.train(parse(TrainParams, {"transitions": [
        {"promptIds": prompt, "responseIds": ids, "logprobs": served, "advantage": 1.0}], "klCoef": 0.1}))
    assert result["maxRatioDeviation"] < 1e-4
    named = dict(session.policy.model.named_parameters())
    assert all(torch.equal(named[n], value) for n, value in base.items())
    session.close()


def test_a_deep_model_from_config_trains_with_pad_tokens_inside_a_sequence(model_dir, tmp_path):
    """A zero pad-embedding row (transformers' init) overflowed the gradients to inf/NaN: Qwen2.5-0.5B's shape on the
    GPU check (24 layers × 896); 48 layers × 64 shows it on the CPU (the growth per layer is smaller when narrow)."""
    import shutil
    deep = tmp_path / "deep"
    shutil.copytree(model_dir, deep)
    config = {k: v for k, v in json.loads((deep / "config.json").read_text()).items() if k != "layer_types"}
    (deep / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 48, "hidden_size": 64,
                                                  "intermediate_size": 128}))
    session = Session(lambda _: None)
    session.load(parse(LoadParams, {"model": {"kind": "hf", "name": str(deep), "fromConfig": True},
                                    "adapter": {"kind": "lora", "rank": 4}}))
    pad = session.policy.pad_id
    words = [w for w in range(len(session.policy.tokenizer)) if w != pad]
    transitions = [{"promptIds": [pad] + [words[(i + 3 * k) % len(words)] for k in range(31)],
                    "responseIds": [words[(i + 5 * k) % len(words)] for k in range(32)],
                    "advantage": 1.0 if i % 2 else -1.0} for i in range(4)]
    result = session.train(parse(TrainParams, {"transitions": transitions}))
    assert result["gradNorm"] < 1e3, result
    assert all(torch.isfinite(p).all() for p in session.policy.model.parameters())
    session.close()
