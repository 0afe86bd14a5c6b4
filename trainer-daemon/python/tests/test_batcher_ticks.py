"""How many decoding steps one turn of the server's event loop takes (batcher.Batcher._tick): steps go on within a
turn while no job is answered (a turn per step cost the loop's I/O poll every step), and a turn ends at the step
that answers a job, so its client's next request is read at once; STEP_SLICE_SECONDS bounds a turn, and a batch
smaller than the last busy spell's decodes one step a turn."""

import asyncio

from lightning_trainer import batcher as batcher_module
from lightning_trainer.batcher import Batcher, Job
from lightning_trainer.generate import Sampling


def run_jobs(session, token_limits: list[int], last_rows: int = 0) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """Submits one greedy job per limit at once and runs the loop until all are answered: per turn that decoded, the
    step counts before and after it; per job, the step count when it was answered."""
    policy = session.serving_policy
    prompt = policy.render_prompt([{"role": "user", "content": "what is 3 plus 4"}], None)
    ticks: list[tuple[int, int]] = []
    answered: dict[int, int] = {}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        engine = Batcher(session, max_batch=8)
        engine.attach(loop)
        engine.last_rows = last_rows  # as if the last busy spell had decoded this many rows
        tick = engine._tick

        def counted() -> None:
            before = engine.steps
            tick()
            if engine.steps > before:
                ticks.append((before, engine.steps))

        engine._tick = counted
        done = loop.create_future()

        def on_done(job: Job, index: int) -> None:
            assert job.error is None, job.error
            answered[index] = engine.steps
            if len(answered) == len(token_limits):
                done.set_result(None)

        for index, limit in enumerate(token_limits):
            engine.submit(
                Job(
                    prompt,
                    [Sampling(max_tokens=limit, temperature=0.0)],
                    on_done=lambda job, index=index: on_done(job, index),
                )
            )
        await asyncio.wait_for(done, 60)
        engine.close()

    asyncio.run(main())
    return ticks, answered


def without_stop_tokens(session, monkeypatch) -> None:
    """Every job runs to its max_tokens (the untrained tiny policy may write its stop token at once)."""
    monkeypatch.setattr(session.serving_policy, "stop_ids", frozenset())


def test_a_turn_decodes_until_a_step_answers_a_job(session, monkeypatch):
    without_stop_tokens(session, monkeypatch)
    monkeypatch.setattr(batcher_module, "STEP_SLICE_SECONDS", 60.0)
    ticks, answered = run_jobs(session, [3, 9])
    assert answered == {0: 3, 1: 9}, answered
    answer_steps = sorted(set(answered.values()))
    # Each turn ended at a step that answered a job (or emptied the batch), and never ran past one.
    assert [end for _, end in ticks] == answer_steps, (ticks, answered)
    assert ticks[0][1] - ticks[0][0] > 1, f"the first turn took one step only: {ticks}"


def test_a_turn_is_one_step_when_the_slice_is_spent(session, monkeypatch):
    without_stop_tokens(session, monkeypatch)
    monkeypatch.setattr(batcher_module, "STEP_SLICE_SECONDS", 0.0)
    ticks, answered = run_jobs(session, [3, 9])
    assert answered == {0: 3, 1: 9}, answered
    assert ticks == [(step, step + 1) for step in range(9)], ticks


def test_a_turn_is_one_step_while_the_batch_is_smaller_than_the_last_spells(session, monkeypatch):
    """Fewer rows than the last busy spell had: the others are likely on their way, and join at the next step."""
    without_stop_tokens(session, monkeypatch)
    monkeypatch.setattr(batcher_module, "STEP_SLICE_SECONDS", 60.0)
    ticks, answered = run_jobs(session, [3, 9], last_rows=3)
    assert answered == {0: 3, 1: 9}, answered
    assert ticks == [(step, step + 1) for step in range(9)], ticks
