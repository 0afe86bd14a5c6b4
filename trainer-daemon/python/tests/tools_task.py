"""The recipe's "tools" task, driven directly in Python: RL must learn which tool a question needs.

`Q:3 minus 7` (operands 0–9) → call 1 picks ADD/SUB/MUL(a,b) → the tool's result comes back → call 2 answers the number.
Warm-start demonstrations pick the tool at random, so SFT teaches the format and copying but not the routing.
Reward 1 when the final answer is right; both calls get the episode's GRPO advantage (identical credit).
"""

import json
from dataclasses import dataclass

from lightning_trainer.generate import Sampling, generate
from lightning_trainer.params import SftParams, TrainParams
from lightning_trainer.schema import parse

OPS = {"plus": ("ADD", lambda a, b: a + b), "minus": ("SUB", lambda a, b: a - b), "times": ("MUL", lambda a, b: a * b)}
TOOL_FNS = {name: fn for name, fn in OPS.values()}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
    for name in TOOL_FNS
]


@dataclass
class Task:
    a: int
    b: int
    word: str

    @property
    def messages(self):
        return [{"role": "user", "content": f"{self.a} {self.word} {self.b}"}]

    @property
    def answer(self):
        return OPS[self.word][1](self.a, self.b)


def tasks(count, rng):
    return [Task(rng.randrange(0, 10), rng.randrange(0, 10), rng.choice(list(OPS))) for _ in range(count)]


def call(name, a, b):
    return {
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps({"a": a, "b": b})}}
        ]
    }


def demonstrations(items, rng):
    examples = []
    for task in items:
        tool = rng.choice(list(TOOL_FNS))
        first = call(tool, task.a, task.b)
        examples.append({"messages": task.messages, "tools": TOOLS, "completion": first})
        second = task.messages + [
            {"role": "assistant", **first},
            {"role": "tool", "tool_call_id": "c", "content": str(TOOL_FNS[tool](task.a, task.b))},
        ]
        examples.append(
            {"messages": second, "tools": TOOLS, "completion": {"content": str(TOOL_FNS[tool](task.a, task.b))}}
        )
    return examples


def episodes(session, items, rng, temperature=1.0):
    """Run every task once (batched); returns per-episode reward and the transitions of its calls."""
    policy = session.policy
    sampling = lambda: Sampling(max_tokens=16, temperature=temperature, seed=rng.randrange(1 << 30))  # noqa: E731
    prompts = [policy.render_prompt(t.messages, TOOLS) for t in items]
    firsts = generate(policy, prompts, [sampling() for _ in items])
    calls = [[{"promptIds": p, "responseIds": o.ids, "logprobs": o.logprobs}] for p, o in zip(prompts, firsts)]
    follow, follow_index = [], []
    for i, (task, out) in enumerate(zip(items, firsts)):
        _, tool_calls = policy.parse_output(policy.decode(out.ids).rstrip("\n"), TOOLS)
        if tool_calls and out.finish_reason == "stop":
            fn = tool_calls[0]["function"]
            args = json.loads(fn["arguments"])
            result = TOOL_FNS[fn["name"]](args["a"], args["b"])
            messages = task.messages + [
                {"role": "assistant", "tool_calls": tool_calls},
                {"role": "tool", "tool_call_id": "c", "content": str(result)},
            ]
            follow.append(policy.render_prompt(messages, TOOLS))
            follow_index.append(i)
    rewards = [0.0] * len(items)
    if follow:
        seconds = generate(policy, follow, [sampling() for _ in follow])
        for i, prompt, out in zip(follow_index, follow, seconds):
            calls[i].append({"promptIds": prompt, "responseIds": out.ids, "logprobs": out.logprobs})
            rewards[i] = float(policy.decode(out.ids).strip() == str(items[i].answer))
    return rewards, calls


def success(session, items, rng):
    rewards, _ = episodes(session, items, rng)
    return sum(rewards) / len(rewards)


def grpo_iteration(session, pool, rng, tasks_per_iteration=16, group=8):
    """Sample groups, compute GRPO advantages per task, and run one update; returns the mean reward."""
    chosen = [t for t in rng.sample(pool, tasks_per_iteration) for _ in range(group)]
    rewards, calls = episodes(session, chosen, rng)
    transitions = []
    for g in range(tasks_per_iteration):
        block = rewards[g * group : (g + 1) * group]
        mean = sum(block) / group
        std = (sum((r - mean) ** 2 for r in block) / group) ** 0.5
        if std == 0:
            continue
        for k in range(g * group, (g + 1) * group):
            transitions += [{**c, "advantage": (rewards[k] - mean) / (std + 1e-6)} for c in calls[k]]
    if transitions:
        session.train(
            parse(
                TrainParams,
                {
                    "transitions": transitions,
                    "epochs": 2,
                    "minibatch": 128,
                    "microBatch": 128,
                    "seed": rng.randrange(1 << 30),
                },
            )
        )
    return sum(rewards) / len(rewards)


def warm_start(session, pool, rng, threshold):
    return session.sft(
        parse(
            SftParams,
            {
                "examples": demonstrations(pool, rng),
                "steps": 600,
                "batchSize": 32,
                "lr": 3e-3,
                "seed": rng.randrange(1 << 30),
                "untilSampledAccuracy": {"threshold": threshold, "every": 10, "samples": 64},
            },
        )
    )
