"""Lightning's trainer worker: a small PyTorch package the daemon starts as a child process.

It serves the policy being trained over an OpenAI-compatible HTTP endpoint (exact token ids and logprobs),
runs clipped policy-gradient updates on LightningRL transitions, and saves/loads checkpoints. The daemon talks
to it over stdin/stdout JSON lines (see ../PROTOCOL.md and worker.py).
"""

PROTOCOL_VERSION = 1
