"""Several policies in one worker: one LoRA adapter per policy on one tiny Qwen2 (built from a config, nothing
downloaded), served side by side and trained one at a time.

* Serving: calls for different adapters and the base model, sent together, are decoded in one batch (peft's
  mixed-batch forward: the base layers once, each adapter's low-rank update on its own rows) and get exactly the
  tokens each would get alone; each adapter answers as the same weights loaded alone do.
* Training: `train {adapter}` moves that adapter only (the others and the base stay bit for bit), with its own
  optimizer; one policy trains exactly as a plain LoRA run on the same seed (1e-6).
* Checkpoints: `save {adapter}` writes an ordinary LoRA checkpoint that `load {checkpoint}` serves alone and `load
  {policies}` restores; a set exports as one PEFT folder that stock peft loads adapter by adapter.
* Refusals name the fix: the tiny policy, trained norms, an unknown adapter, `sft`.
"""

import json
import threading
from pathlib import Path

import pytest
import torch
from conftest import http, run_stock  # noqa: E402

from lightning_trainer.params import (  # noqa: E402
    ExportParams,
    LoadParams,
    SaveParams,
    ServeParams,
    SftParams,
    TrainParams,
)
from lightning_trainer.schema import BadParams, parse  # noqa: E402
from lightning_trainer.session import Session, StateError  # noqa: E402

LORA = {"kind": "lora", "rank": 4, "alpha": 8, "trainNorms": False}
MESSAGES = [{"role": "user", "content": "what is 3 plus 4"}]


def _load(base_dir, **extra) -> Session:
    session = Session(lambda _: None)
    session.load(
        parse(LoadParams, {"model": {"kind": "hf", "name": base_dir}, "adapter": LORA, "device": "cpu", **extra})
    )
    return session


def _transitions(session: Session, shift: int) -> list[dict]:
    prompt = session.policy.render_prompt(MESSAGES, None)
    return [
        {"promptIds": prompt, "responseIds": [40 + shift + i, 60 + i, 2], "advantage": 1.0 if i % 2 else -1.0}
        for i in range(4)
    ]


def _train(session: Session, shift: int, adapter=None, epochs=2) -> dict:
    params = {"transitions": _transitions(session, shift), "epochs": epochs, "minibatch": 2, "microBatch": 2}
    if adapter is not None:
        params["adapter"] = adapter
    return session.train(parse(TrainParams, params))


@pytest.fixture(scope="module")
def trained(base_dir):
    """Two policies, each trained on different transitions (so the adapters answer differently), serving."""
    session = _load(base_dir, policies=[{"name": "planner"}, {"name": "solver"}], optimizer={"lr": 0.05})
    for _ in range(3):
        _train(session, 0, "planner")
        _train(session, 100, "solver")
    url = session.serve(parse(ServeParams, {}))["url"]
    yield session, url
    session.close()


def _complete(url: str, route: str, seed: int) -> tuple[list[int], int]:
    body = {"messages": MESSAGES, "max_tokens": 8, "temperature": 0, "seed": seed, "return_token_ids": True}
    status, headers, text = http(url, f"{route}/v1/chat/completions", body)
    assert status == 200, text
    return json.loads(text)["choices"][0]["token_ids"], int(headers["X-Lightning-Batch-Size"])


def test_load_names_the_policies_and_counts_every_adapter(base_dir):
    one = _load(base_dir)
    params = {"model": {"kind": "hf", "name": base_dir}, "adapter": LORA, "device": "cpu"}
    policies = [{"name": "planner"}, {"name": "solver"}]
    loaded = Session(lambda _: None).load(parse(LoadParams, {**params, "policies": policies}))
    assert loaded["policies"] == ["planner", "solver"]
    assert loaded["trainable"] == 2 * sum(p.numel() for p in one.policy.trainable().values())


def test_adapters_answer_differently_and_batch_together_with_the_base_model(trained):
    session, url = trained
    routes = ["/adapter/planner", "/adapter/solver", "/base", "/greedy/adapter/solver"]
    alone = {route: _complete(url, route, seed=7)[0] for route in routes}
    assert alone["/adapter/planner"] != alone["/adapter/solver"] != alone["/base"] != alone["/adapter/planner"], alone
    assert alone["/greedy/adapter/solver"] == alone["/adapter/solver"]
    # The same calls sent at once, several per route: one batch across adapters, each row its own tokens.
    results: dict = {}

    def call(route: str, k: int) -> None:
        results[(route, k)] = _complete(url, route, seed=7)

    threads = [threading.Thread(target=call, args=(route, k)) for route in routes for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert max(rows for _, rows in results.values()) > 3, "calls of different adapters share a batch"
    for (route, _), (tokens, _) in results.items():
        assert tokens == alone[route], route
    # The plain route of a server with several policies is the base model (the daemon always names one).
    assert _complete(url, "", seed=7)[0] == alone["/base"]


def test_an_unknown_adapter_is_a_404_naming_the_adapters_held(trained):
    _, url = trained
    status, _, text = http(url, "/adapter/critic/v1/chat/completions", {"messages": MESSAGES})
    assert status == 404 and "planner, solver" in json.loads(text)["error"]["message"]


def test_train_moves_only_its_adapter_and_the_base_stays(base_dir):
    session = _load(base_dir, policies=[{"name": "planner"}, {"name": "solver"}])
    before = {n: p.detach().clone() for n, p in session.policy.model.named_parameters()}
    result = _train(session, 0, "solver")
    assert result["step"] == 1
    moved = {n for n, p in session.policy.model.named_parameters() if not torch.equal(before[n], p.detach())}
    assert moved and all(".lora_A.solver." in n or ".lora_B.solver." in n for n in moved), moved
    with pytest.raises(BadParams, match="params.adapter must name one of the loaded policies"):
        _train(session, 0, "critic")
    with pytest.raises(BadParams, match="params.adapter must name one of"):
        _train(session, 0)
    with pytest.raises(StateError, match="holds several"):
        session.sft(parse(SftParams, {"examples": [{"messages": MESSAGES, "completion": {"content": "7"}}]}))


def test_one_policy_trains_exactly_as_a_plain_lora_run(base_dir):
    plain = _load(base_dir, seed=3)
    named = _load(base_dir, seed=3, policies=[{"name": "solver"}])
    for shift in (0, 5):
        a, b = _train(plain, shift), _train(named, shift, "solver")
        assert abs(a["loss"] - b["loss"]) < 1e-6
    ours = named.policy.adapter_weights("solver")
    theirs = plain.policy.trainable()
    assert set(ours) == set(theirs)
    assert max((ours[n] - theirs[n]).abs().max().item() for n in ours) < 1e-6


def test_a_policy_checkpoint_is_a_plain_lora_checkpoint_and_restores_into_the_set(trained, tmp_path):
    session, url = trained
    path = session.save(parse(SaveParams, {"dir": str(tmp_path / "planner"), "adapter": "planner"}))["path"]
    config = json.loads(Path(path, "config.json").read_text())
    assert config["policy"] == "planner" and config["policies"] is None and config["adapter"]["trainNorms"] is False
    alone = Session(lambda _: None)
    alone.load(parse(LoadParams, {"checkpoint": path, "device": "cpu"}))
    alone_url = alone.serve(parse(ServeParams, {}))["url"]
    assert _complete(alone_url, "", seed=7)[0] == _complete(url, "/adapter/planner", seed=7)[0]
    alone.close()
    solver = session.save(parse(SaveParams, {"dir": str(tmp_path / "solver"), "adapter": "solver"}))["path"]
    again = _load(
        session.load_params.model.name,
        policies=[{"name": "planner", "checkpoint": path}, {"name": "solver", "checkpoint": solver}],
    )
    for name in ("planner", "solver"):
        ours, theirs = again.policy_optimizers[name], session.policy_optimizers[name]
        assert ours.state_dict()["state"].keys() == theirs.state_dict()["state"].keys()
        for key, value in again.policy.adapter_weights(name).items():
            assert torch.equal(value, session.policy.adapter_weights(name)[key])
    with pytest.raises(BadParams, match="params.adapter"):
        session.save(parse(SaveParams, {"dir": str(tmp_path / "x")}))


STOCK = """
    import peft
    base = transformers.AutoModelForCausalLM.from_pretrained(spec["base"], **dtype)
    first, *others = spec["names"]
    model = peft.PeftModel.from_pretrained(base, spec["dir"], subfolder=first, adapter_name=first)
    for name in others:
        model.load_adapter(spec["dir"], adapter_name=name, subfolder=name)
    model.eval()
    ids = torch.tensor([spec["ids"]])
    out = {}
    for name in spec["names"]:
        model.set_adapter(name)
        with torch.no_grad():
            out[name] = model(input_ids=ids).logits[0, -1].tolist()
    print(json.dumps(out))
"""


def test_the_set_exports_as_one_peft_folder_that_stock_peft_loads(trained, base_dir, tmp_path):
    session, _ = trained
    adapters = [
        {
            "name": name,
            "checkpoint": session.save(parse(SaveParams, {"dir": str(tmp_path / name), "adapter": name}))["path"],
        }
        for name in ("planner", "solver")
    ]
    out = tmp_path / "set"
    result = session.export(parse(ExportParams, {"adapters": adapters, "format": "peft", "out": str(out)}))
    assert "planner/adapter_config.json" in result["files"] and "solver/adapter_model.safetensors" in result["files"]
    assert result["baseModel"] == base_dir
    ids = session.policy.render_prompt(MESSAGES, None)
    spec = {"base": base_dir, "dir": str(out), "names": ["planner", "solver"], "ids": ids}
    logits = json.loads(run_stock(STOCK, spec, tmp_path))
    for name in ("planner", "solver"):
        session.policy.activate(name)
        with torch.no_grad():
            ours = session.policy.model(input_ids=torch.tensor([ids])).logits[0, -1]
        assert (ours - torch.tensor(logits[name])).abs().max().item() < 1e-5, name
    with pytest.raises(BadParams, match="peft only"):
        parse(ExportParams, {"adapters": adapters, "format": "merged", "out": str(tmp_path / "m")})


def test_refusals_name_the_fix(base_dir):
    with pytest.raises(BadParams, match="tiny built-in policy has none"):
        Session(lambda _: None).load(
            parse(LoadParams, {"model": {"kind": "tiny"}, "adapter": {"kind": "lora"}, "policies": [{"name": "a"}]})
        )
    with pytest.raises(BadParams, match="trainNorms false"):
        _load(base_dir, adapter={"kind": "lora"}, policies=[{"name": "a"}])
    with pytest.raises(BadParams, match="not base or default"):
        parse(LoadParams, {"checkpoint": "x", "policies": [{"name": "base"}]})
    with pytest.raises(BadParams, match="each name once"):
        parse(LoadParams, {"model": {"kind": "tiny"}, "adapter": {"kind": "full"}, "policies": [{"name": "a"}] * 2})
    plain = _load(base_dir)
    with pytest.raises(BadParams, match="loaded one policy"):
        _train(plain, 0, "planner")
