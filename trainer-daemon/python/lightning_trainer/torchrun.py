"""`python3 -m lightning_trainer.torchrun ARGS…`: torchrun (torch.distributed.run), unchanged, with one fix for
torch < 2 on Python ≥ 3.11 (Debian's torch 1.13): there `Std.from_str("0")` returns None, because iterating an
IntFlag no longer yields its zero member, and torchrun fails before it starts a single rank. The fix maps the
missing value to `Std.NONE`; on any other torch this module is exactly `torchrun`.
"""

from __future__ import annotations

from torch.distributed.elastic.multiprocessing import api


def _patch_std() -> None:
    if api.Std.from_str("0") is not None:
        return
    original = api.Std.from_str.__func__

    def from_str(cls, vm):
        value = original(cls, vm)
        if isinstance(value, dict):
            return {rank: cls.NONE if std is None else std for rank, std in value.items()}
        return cls.NONE if value is None else value

    api.Std.from_str = classmethod(from_str)


def main() -> None:
    _patch_std()
    from torch.distributed.run import main as torchrun

    torchrun()


if __name__ == "__main__":
    main()
