"""Checkpoints exported as a PEFT adapter and as Hugging Face model folders, loaded by the stock libraries alone.

The base is a tiny Qwen2 built from a config and written with `save_pretrained` (a user's downloaded model, in
miniature). A LoRA run (norms trained too) and a full fine-tune each take two updates and save a checkpoint; the
checkpoint is served by the worker as `lightning run --checkpoint` serves it, and each export is loaded in a separate
Python process started with `-I` from an empty folder (no project code on sys.path: the script checks it), by
`PeftModel.from_pretrained(base, DIR)` or `AutoModelForCausalLM.from_pretrained(DIR)` with the folder's own
tokenizer and chat template. Its logprobs of the served tokens must equal the served ones within 1e-5. A Hugging Face
folder also carries what another server needs: a generation config that stops at the end of a turn, and the chat
template the policy was trained with.
"""

import json
import os
from pathlib import Path

import pytest
import transformers
from conftest import http, run_stock  # noqa: E402

from lightning_trainer.bench import CHAT_TEMPLATE  # noqa: E402
from lightning_trainer.export import ExportRefused  # noqa: E402
from lightning_trainer.params import ExportParams, LoadParams, SaveParams, ServeParams, TrainParams  # noqa: E402
from lightning_trainer.schema import BadParams, parse  # noqa: E402
from lightning_trainer.session import Session  # noqa: E402

PROMPTS = [
    [{"role": "user", "content": "hi there"}],
    [{"role": "user", "content": "what is 3 plus 4"}],
    [{"role": "system", "content": "tools"}, {"role": "user", "content": "add 1"}],
]

STOCK = """
    if spec["format"] == "peft":
        import peft
        base = transformers.AutoModelForCausalLM.from_pretrained(spec["base"], **dtype)
        model = peft.PeftModel.from_pretrained(base, spec["dir"])
    else:
        model = transformers.AutoModelForCausalLM.from_pretrained(spec["dir"], **dtype)
    model.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(spec["dir"])
    out = []
    for case in spec["cases"]:
        text = tokenizer.apply_chat_template(case["messages"], add_generation_prompt=True, tokenize=False)
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + case["tokens"]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
        logprobs = torch.log_softmax(logits[0, len(prompt) - 1:-1], dim=-1)
        picked = logprobs.gather(-1, torch.tensor(case["tokens"])[:, None])[:, 0]
        out.append({"prompt": prompt, "logprobs": picked.tolist()})
    print(json.dumps(out))
"""


def _trained_checkpoint(load: dict, folder) -> str:
    session = Session(lambda _: None)
    session.load(parse(LoadParams, {**load, "device": "cpu", "seed": 0}))
    prompt = session.policy.render_prompt(PROMPTS[0], None)
    for step in range(2):
        transitions = [
            {"promptIds": prompt, "responseIds": [5 + i, 9 + step, 3], "advantage": 1.0 if i % 2 else -1.0}
            for i in range(4)
        ]
        session.train(parse(TrainParams, {"transitions": transitions, "epochs": 1}))
    path = session.save(parse(SaveParams, {"dir": str(folder)}))["path"]
    session.close()
    return path


def _served(checkpoint_dir: str) -> list[dict]:
    """What the checkpoint serves (greedy tokens and their logprobs), through the worker's HTTP endpoint."""
    session = Session(lambda _: None)
    session.load(parse(LoadParams, {"checkpoint": checkpoint_dir, "device": "cpu"}))
    url = session.serve(parse(ServeParams, {}))["url"]
    cases = []
    for messages in PROMPTS:
        status, _, text = http(
            url,
            "/v1/chat/completions",
            {"messages": messages, "max_tokens": 6, "temperature": 0, "logprobs": True, "return_token_ids": True},
        )
        assert status == 200, text
        body = json.loads(text)
        cases.append(
            {
                "messages": messages,
                "prompt": body["prompt_token_ids"],
                "tokens": body["choices"][0]["token_ids"],
                "logprobs": [e["logprob"] for e in body["choices"][0]["logprobs"]["content"]],
            }
        )
    session.close()
    return cases


def _stock(tmp_path, spec: dict, cases: list[dict]) -> list[dict]:
    """Logprobs of each case's served tokens after its prompt, as rendered by the folder's own chat template."""
    spec = {**spec, "cases": [{"messages": c["messages"], "tokens": c["tokens"]} for c in cases]}
    return json.loads(run_stock(STOCK, spec, tmp_path).strip().splitlines()[-1])


def _export(checkpoint_dir: str, fmt: str, out) -> dict:
    return Session(lambda _: None).export(
        parse(ExportParams, {"checkpoint": checkpoint_dir, "format": fmt, "out": str(out)})
    )


def _assert_serves_elsewhere(folder: str) -> None:
    """What a server reading the folder (vLLM, TGI, transformers' generate) needs beside the weights: a generation
    config that stops at the end of a turn, and the chat template the policy was trained with."""
    files = set(os.listdir(folder))
    assert "generation_config.json" in files, files
    generation = json.loads(Path(folder, "generation_config.json").read_text())
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    end_of_turn = tokenizer.convert_tokens_to_ids("<|im_end|>")
    eos = generation["eos_token_id"]
    assert end_of_turn in (eos if isinstance(eos, list) else [eos]), generation
    assert tokenizer.chat_template == CHAT_TEMPLATE, "the chat template travels with the model"
    assert "chat_template.jinja" in files or "chat_template" in json.loads(
        Path(folder, "tokenizer_config.json").read_text()
    ), files


def _assert_same_policy(cases, loaded):
    assert len(loaded) == len(cases)
    for case, got in zip(cases, loaded):
        assert got["prompt"] == case["prompt"], "the exported chat template renders the prompt the policy saw"
        assert len(got["logprobs"]) == len(case["tokens"]) > 0
        assert max(abs(a - b) for a, b in zip(got["logprobs"], case["logprobs"])) < 1e-5, (got, case)


@pytest.fixture(scope="module")
def lora_checkpoint(base_dir, tmp_path_factory):
    """One LoRA checkpoint (norms trained too) and what it serves, shared by the formats' tests."""
    ckpt = _trained_checkpoint(
        {"model": {"kind": "hf", "name": base_dir}, "adapter": {"kind": "lora", "rank": 4}},
        tmp_path_factory.mktemp("lora") / "ckpt",
    )
    return ckpt, _served(ckpt)


@pytest.mark.parametrize("fmt", ["peft", "merged", "hf"])
def test_a_lora_checkpoint_exports_to_what_the_stock_libraries_load(base_dir, lora_checkpoint, tmp_path, fmt):
    ckpt, cases = lora_checkpoint
    exported = _export(ckpt, fmt, tmp_path / "out")
    files = set(exported["files"])
    if fmt == "peft":
        assert {"adapter_config.json", "adapter_model.safetensors", "tokenizer.json"} <= files, files
        config = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
        assert config["base_model_name_or_path"] == base_dir and exported["baseModel"] == base_dir
        assert set(config["modules_to_save"]) == {"input_layernorm", "post_attention_layernorm", "norm"}
    else:
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= files, files
        assert not any(n.startswith("adapter") for n in files)
        _assert_serves_elsewhere(exported["path"])
    _assert_same_policy(cases, _stock(tmp_path, {"format": fmt, "dir": exported["path"], "base": base_dir}, cases))
    if fmt == "peft":  # once: the trained policy is not the base (the updates changed what it says)
        base = _stock(tmp_path, {"format": "hf", "dir": base_dir, "base": base_dir}, cases)
        assert max(abs(a - b) for c, b_ in zip(cases, base) for a, b in zip(c["logprobs"], b_["logprobs"])) > 1e-3


def test_a_full_fine_tune_exports_as_a_hugging_face_folder(base_dir, tmp_path):
    ckpt = _trained_checkpoint(
        {"model": {"kind": "hf", "name": base_dir}, "adapter": {"kind": "full"}}, tmp_path / "ckpt"
    )
    cases = _served(ckpt)
    exported = _export(ckpt, "hf", tmp_path / "out")
    _assert_serves_elsewhere(exported["path"])
    _assert_same_policy(cases, _stock(tmp_path, {"format": "hf", "dir": exported["path"], "base": base_dir}, cases))
    with pytest.raises(ExportRefused, match="full fine-tune: it has no adapter"):
        _export(ckpt, "peft", tmp_path / "peft")


def test_lora_on_a_base_built_from_config_exports_merged_and_refuses_peft(base_dir, tmp_path):
    ckpt = _trained_checkpoint(
        {"model": {"kind": "hf", "name": base_dir, "fromConfig": True}, "adapter": {"kind": "lora", "rank": 4}},
        tmp_path / "ckpt",
    )
    cases = _served(ckpt)
    with pytest.raises(ExportRefused, match="random weights"):
        _export(ckpt, "peft", tmp_path / "peft")
    assert not (tmp_path / "peft").exists()
    exported = _export(ckpt, "merged", tmp_path / "out")
    _assert_serves_elsewhere(exported["path"])
    _assert_same_policy(cases, _stock(tmp_path, {"format": "merged", "dir": exported["path"], "base": base_dir}, cases))


def test_the_tiny_policy_is_refused_with_the_reason_and_nothing_is_written_over(tmp_path):
    from conftest import make_session

    session = make_session()
    ckpt = session.save(parse(SaveParams, {"dir": str(tmp_path / "ckpt")}))["path"]
    with pytest.raises(ExportRefused, match="tiny built-in policy .* not a transformers architecture"):
        _export(ckpt, "hf", tmp_path / "out")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    with pytest.raises(BadParams, match="not an empty folder"):
        Session(lambda _: None).export(
            parse(ExportParams, {"checkpoint": ckpt, "format": "hf", "out": str(tmp_path / "taken")})
        )
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"
    with pytest.raises(BadParams, match="must be one of"):
        parse(ExportParams, {"checkpoint": ckpt, "format": "gguf", "out": str(tmp_path / "x")})
    session.close()
