"""Which GPUs this process meters by default: under ``torchrun`` the rank's own GPU."""

from __future__ import annotations

import os
from collections.abc import Sequence


def default_gpus(visible: Sequence[int], env: dict[str, str] | None = None) -> list[int]:
    """The CUDA-visible GPU indices this process should meter by default.

    Under torchrun (``LOCAL_RANK`` set and ``LOCAL_WORLD_SIZE``/``WORLD_SIZE`` > 1): the GPU at
    ``LOCAL_RANK`` when it is visible, or the only visible GPU when each rank sees exactly one
    (per-rank ``CUDA_VISIBLE_DEVICES``). Otherwise all visible GPUs.
    """
    env = os.environ if env is None else env
    visible = list(visible)
    local = env.get("LOCAL_RANK")
    world = int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", "1")) or 1)
    if local is None or world <= 1 or not visible:
        return visible
    lr = int(local)
    if len(visible) == 1:
        return visible
    if lr in visible:
        return [lr]
    return visible
