"""The serving bench's clients (lightning_trainer.serving_clients, run by `npm run bench`): they send the baseline's
requests and count exactly the tokens the baseline's batched generate() makes, and a refused request fails the
measurement with the server's answer instead of being counted."""

import asyncio

import pytest
from conftest import make_session

from lightning_trainer.bench import direct_tokens, direct_tokens_per_second, http_tokens_per_second
from lightning_trainer.params import ServeParams
from lightning_trainer.schema import parse
from lightning_trainer.serving_clients import run


@pytest.fixture(scope="module")
def served():
    session = make_session()
    url = session.serve(parse(ServeParams, {}))["url"]
    yield session, url
    session.close()


def test_the_clients_send_the_baselines_requests_and_count_its_tokens(served):
    session, url = served
    clients, rounds = 4, 2
    expected = direct_tokens(session, clients, rounds)
    tokens, seconds = asyncio.run(run(url, clients, rounds))
    assert tokens == expected and seconds > 0
    # The same measurement through a fresh process, as the bench takes it, next to its baseline.
    assert http_tokens_per_second(url, clients, rounds) > 0
    assert direct_tokens_per_second(session, clients, rounds) > 0


def test_a_refused_request_fails_the_measurement_naming_the_answer(served):
    _, url = served
    wrong_key = url.rsplit("/", 1)[0] + "/not-the-key"
    with pytest.raises(RuntimeError, match=r"401 .*unknown policy server key"):
        http_tokens_per_second(wrong_key, 2, 1)
