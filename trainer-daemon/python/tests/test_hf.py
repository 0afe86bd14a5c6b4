"""Hugging Face policies on PyTorch 2 + transformers + peft (requirements-test.txt; a missing package fails).

Tiny Qwen2 and Llama models built from configs with random weights and tokenizers made on the spot (nothing
downloaded): chat templates with tools, Hermes tool-call parsing, served logprobs vs recomputation, LoRA adapters
trained, saved, reloaded and merged, the base untouched, checkpoint resume."""

import json

import peft  # noqa: F401  (required: LoRA)
import pytest
import torch
import transformers
from conftest import hf_model_dir, http  # noqa: E402

from lightning_trainer.hf import hermes_certain_content, parse_hermes_tool_calls  # noqa: E402
from lightning_trainer.params import LoadParams, SaveParams, ServeParams, TrainParams  # noqa: E402
from lightning_trainer.schema import parse  # noqa: E402
from lightning_trainer.session import Session  # noqa: E402
from lightning_trainer.train import sequence_logprobs  # noqa: E402

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content or '' }}<|im_end|>\n{% endfor %}"
    "{% if tools %}<|im_start|>tools\n{{ tools | length }}<|im_end|>\n{% endif %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = [
        "<unk>",
        "<|endoftext|>",
        "<|im_start|>",
        "<|im_end|>",
        "\n",
        "user",
        "assistant",
        "tools",
        "hi",
        "there",
        "1",
        "2",
        "3",
    ]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(pattern="\n", behavior="isolated")
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token="<unk>"
    )
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    fast.chat_template = TEMPLATE
    path = tmp_path_factory.mktemp("qwen")
    fast.save_pretrained(path)
    transformers.Qwen2Config(
        vocab_size=len(words),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        eos_token_id=3,
        pad_token_id=1,
    ).save_pretrained(path)
    return str(path)


def test_hermes_tool_calls_are_parsed_only_for_known_tools():
    tools = [{"type": "function", "function": {"name": "add"}}]
    content, calls = parse_hermes_tool_calls('ok <tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', tools)
    assert content == "ok" and json.loads(calls[0]["function"]["arguments"]) == {"a": 1}
    assert parse_hermes_tool_calls('<tool_call>{"name": "rm"}</tool_call>', tools)[1] == []


def test_lora_policy_serves_exact_tokens_and_trains_adapters_only(model_dir):
    session = Session(lambda _: None)
    loaded = session.load(
        parse(
            LoadParams,
            {
                "model": {"kind": "hf", "name": model_dir, "fromConfig": True},
                "adapter": {"kind": "lora", "rank": 4, "trainNorms": False},
            },
        )
    )
    assert 0 < loaded["trainable"] < loaded["parameters"]
    url = session.serve(parse(ServeParams, {}))["url"]
    status, _, text = http(
        url,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "max_tokens": 8,
            "logprobs": True,
            "return_token_ids": True,
        },
    )
    assert status == 200, text
    response = json.loads(text)
    prompt, ids = response["prompt_token_ids"], response["choices"][0]["token_ids"]
    assert prompt == session.policy.render_prompt([{"role": "user", "content": "hi"}], [{"type": "function"}])
    assert 10 in prompt  # the template rendered the tools (their count, "1")
    served = [e["logprob"] for e in response["choices"][0]["logprobs"]["content"]]
    recomputed = sequence_logprobs(session.policy, [prompt], [ids]).logprobs[0, -len(ids) :].tolist()
    assert max(abs(a - b) for a, b in zip(served, recomputed)) < 1e-4
    # A tokenizer without BOS encodes "" to no token: a 400 naming the prompt, not a model error (500) or pad tokens.
    status, _, text = http(url, "/v1/completions", {"prompt": "", "max_tokens": 2})
    assert status == 400 and json.loads(text)["error"]["param"] == "prompt", text

    base = {n: p.detach().clone() for n, p in session.policy.model.named_parameters() if "lora_" not in n}
    result = session.train(
        parse(
            TrainParams,
            {
                "transitions": [{"promptIds": prompt, "responseIds": ids, "logprobs": served, "advantage": 1.0}],
                "klCoef": 0.1,
            },
        )
    )
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
    (deep / "config.json").write_text(
        json.dumps({**config, "num_hidden_layers": 48, "hidden_size": 64, "intermediate_size": 128})
    )
    session = Session(lambda _: None)
    session.load(
        parse(
            LoadParams,
            {"model": {"kind": "hf", "name": str(deep), "fromConfig": True}, "adapter": {"kind": "lora", "rank": 4}},
        )
    )
    pad = session.policy.pad_id
    words = [w for w in range(len(session.policy.tokenizer)) if w != pad]
    transitions = [
        {
            "promptIds": [pad] + [words[(i + 3 * k) % len(words)] for k in range(31)],
            "responseIds": [words[(i + 5 * k) % len(words)] for k in range(32)],
            "advantage": 1.0 if i % 2 else -1.0,
        }
        for i in range(4)
    ]
    result = session.train(parse(TrainParams, {"transitions": transitions}))
    assert result["gradNorm"] < 1e3, result
    assert all(torch.isfinite(p).all() for p in session.policy.model.parameters())
    session.close()


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def bpe_model_dir(request, tmp_path_factory):
    return hf_model_dir(tmp_path_factory.mktemp(request.param) / "model", arch=request.param)


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "a + b",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]


def _load(model_dir, **load):
    session = Session(lambda _: None)
    session.load(
        parse(
            LoadParams,
            {
                "model": {"kind": "hf", "name": model_dir, "fromConfig": True},
                "adapter": {"kind": "lora", "rank": 4},
                "seed": 0,
                **load,
            },
        )
    )
    return session


def test_logprob_bytes_are_each_token_s_own_also_inside_a_character(bpe_model_dir):
    """Tokens holding part of a UTF-8 character (CJK, emoji) decode alone to U+FFFD: their bytes are still theirs, and
    a client joining the bytes of an answer's tokens gets its text back (OpenAI's logprobs `bytes`)."""
    session = _load(bpe_model_dir)
    try:
        text = "你好😀 ok"
        ids = session.policy.encode_prompt(text)
        infos = [session.policy.token_info(token_id) for token_id in ids]
        assert any(token == "\ufffd" for token, _ in infos), "some token holds part of a character"
        assert bytes(b for _, token_bytes in infos for b in token_bytes) == text.encode("utf-8")
    finally:
        session.close()


def test_chat_template_renders_tools_and_tool_calls_round_trip(bpe_model_dir):
    session = _load(bpe_model_dir)
    policy = session.policy
    messages = [{"role": "user", "content": "what is 3 plus 4"}]
    prompt = policy.decode(policy.render_prompt(messages, TOOLS))
    assert '"name": "add"' in prompt and prompt.rstrip().endswith("assistant"), prompt
    call = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}}
    completion = policy.render_completion(messages, TOOLS, {"tool_calls": [call]})
    assert completion[-1] in policy.stop_ids
    content, calls = policy.parse_output(policy.decode(completion[:-1]), TOOLS)
    assert content is None and [c["function"]["name"] for c in calls] == ["add"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"a": 3, "b": 4}
    # The tool's result and the next turn render after the call (a second LLM call of the same episode).
    follow_up = messages + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "7"},
    ]
    assert policy.decode(policy.render_prompt(follow_up, TOOLS)).count("<tool_call>") == 1
    session.close()


def _transitions(session, count=4, seed=0):
    """Sampled responses of the policy itself to one prompt, with their served logprobs and ± advantages."""
    from lightning_trainer.generate import Sampling, generate

    prompt = session.policy.render_prompt([{"role": "user", "content": "hi there"}], TOOLS)
    outputs = generate(session.policy, [prompt] * count, [Sampling(max_tokens=6, seed=seed + i) for i in range(count)])
    return [
        {"promptIds": prompt, "responseIds": o.ids, "logprobs": o.logprobs, "advantage": 1.0 if i % 2 else -1.0}
        for i, o in enumerate(outputs)
    ]


def _served_logprobs(session, transitions):
    return sequence_logprobs(
        session.policy, [t["promptIds"] for t in transitions], [t["responseIds"] for t in transitions]
    ).logprobs


def test_lora_adapters_trained_saved_reloaded_and_merged(bpe_model_dir, tmp_path):
    session = _load(bpe_model_dir)
    batch = _transitions(session)
    before = _served_logprobs(session, batch)
    result = session.train(parse(TrainParams, {"transitions": batch}))
    assert result["maxRatioDeviation"] < 1e-4  # served (generation) logprobs == training logprobs
    trained = _served_logprobs(session, batch)
    assert not torch.allclose(before, trained)
    saved = session.save(parse(SaveParams, {"dir": str(tmp_path / "ckpt")}))
    assert saved["bytes"] > 0

    reloaded = Session(lambda _: None)
    reloaded.load(parse(LoadParams, {"checkpoint": saved["path"]}))  # model + adapter from the checkpoint
    assert torch.allclose(_served_logprobs(reloaded, batch), trained, atol=1e-6)

    # The adapters are plain peft LoRA: merged into the base they give the same policy without peft.
    merged = reloaded.policy.model.merge_and_unload()
    assert not any("lora_" in n for n, _ in merged.named_parameters())
    reloaded.policy.model, reloaded.policy.lora = merged, False
    assert torch.allclose(_served_logprobs(reloaded, batch), trained, atol=1e-5)
    reloaded.close()
    session.close()


def test_checkpoint_resume_continues_the_same_run(bpe_model_dir, tmp_path):
    """Train, save, train again — and, from the saved checkpoint in a new worker, the same second update."""
    session = _load(bpe_model_dir)
    first, second = _transitions(session, seed=0), _transitions(session, seed=10)
    session.train(parse(TrainParams, {"transitions": first}))
    saved = session.save(parse(SaveParams, {"dir": str(tmp_path / "ckpt")}))
    session.train(parse(TrainParams, {"transitions": second}))
    straight = {n: p.detach().clone() for n, p in session.policy.trainable().items()}

    resumed = Session(lambda _: None)
    resumed.load(parse(LoadParams, {"checkpoint": saved["path"]}))
    assert resumed.step == 1
    resumed.train(parse(TrainParams, {"transitions": second}))
    for name, value in resumed.policy.trainable().items():
        assert torch.allclose(value, straight[name], atol=1e-6), name
    resumed.close()
    session.close()


def test_a_stream_sends_only_text_that_stays_content_whatever_follows():
    """hermes_certain_content (what a stream may send of an unfinished completion) is, at every cut, a prefix of
    the content parse_hermes_tool_calls finally gives."""
    tools = [{"type": "function", "function": {"name": "add"}}]
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'
    texts = [
        "plain answer <tool_ without a call",
        f"Let me add.  {call}",
        f"{call} done",
        f"  leading space then {call}",
        "<tool_call>not json</tool_call> stays content",
        "trailing space \n",
    ]
    for text in texts:
        content, _ = parse_hermes_tool_calls(text, tools)
        for cut in range(len(text) + 1):
            part = text[:cut]
            sent = part[: hermes_certain_content(part, tools)]
            assert (content or "").startswith(sent), (text, cut, sent)
    assert hermes_certain_content("Let me add. <tool", tools) == len("Let me add.")
    assert hermes_certain_content("<tool_call>", None) == len("<tool_call>")  # no tools: all of it is content
