"""The SMs an expert all-to-all holds while it runs, by dispatcher (`parallel.ep_dispatcher`), as a share of
the GPU's SMs (`gpu.sms`): what the compute beside an overlapped all-to-all loses (DualPipe's chunk pair,
`plan/overlap.py`; Megatron's combined 1F1B, `plan/ep_overlap.py`). The evaluators slow the compute that
runs while the all-to-all is in flight by this share (`evaluate/sm_share.py`, the same scheduler in both);
an all-to-all with no compute beside it (a plain pass waits on it) costs its own time only.

deepep     DeepEP's normal (training / prefill) kernels run on a fixed number of SMs, a class attribute of
           its Buffer: `num_sms: int = 20` (deepseek-ai/DeepEP deep_ep/buffer.py:30 at 567632dd59810d77b3cc
           05553df953cc0f779799, the last V1 layout; deep_ep/buffers/legacy.py:31 at dd758caf451848bd150e1
           046af3d0a73e5fff38d), changed only by `Buffer.set_num_sms` (legacy.py:154-163). Every
           dispatch / combine config is built with it (legacy.py:246-257, 276-287). The V1 README example
           sets 24 (its V1 guide legacy.md:130-132) and the internode test 24 (tests/test_internode.py:322 at
           567632dd); EPv2's README says V3-like training drops "from 24 to 4 - 6" SMs (README.md:22 at
           dd758caf): that is a different kernel family, not priced here. The DeepSeek-V3 report (§3.2.2)
           states its setup's all-to-all kernels ran on 20 SMs, the Buffer default.
alltoall   Megatron's alltoall dispatcher calls NCCL's all-to-all, a group of send/recv pairs; NCCL runs a
           p2p group on its p2p channels, one thread block per channel, resident until the group ends.
           p2pnChannels = pow2Up(min(nChannels, NCCL_MAX_P2P_NCHANNELS = MAXCHANNELS = 64))
           (NVIDIA/nccl src/graph/paths.cc:958, 980-990 at 5067397c2676d5aed50042fc39e5c8ee96eb0027;
           MAXCHANNELS src/include/device.h:91), nChannels being the communicator's execution channels:
           twice the rings its topology search found (src/graph/connect.cc:460; "typically 2x the search
           channels", NCCL maintainer in NVIDIA/nccl#1041), the search stopping at MAXCHANNELS / 2 = 32
           rings (src/init.cc:1177), so 2 to 64 channels. 32 (16 rings, doubled) is an assumption taken for
           every GPU, not a search run on each topology here: a node with less NVLink finds fewer rings (NVIDIA/nccl#892 shows an 8-GPU H800
           node under an older NCCL with 16 p2p channels), and would hold fewer SMs.
"""
from __future__ import annotations

DEEPEP_NUM_SMS = 20
"""DeepEP's `Buffer.num_sms` default: the SMs its normal dispatch / combine kernels run on (module docstring)."""
NCCL_ALL_TO_ALL_CHANNELS = 32
"""NCCL's p2p channels for an all-to-all on an NVLink node, one thread block (one SM) each: an assumption
within NCCL's bounds (module docstring)."""
EP_COMM_SMS = {"deepep": DEEPEP_NUM_SMS, "alltoall": NCCL_ALL_TO_ALL_CHANNELS}
"""SMs one expert all-to-all holds, by `parallel.ep_dispatcher`."""


def ep_sm_share(dispatcher: str, gpu_sms: int | None) -> float:
    """Share of the compute rate an in-flight expert all-to-all takes: SMs it holds / the GPU's SMs, at
    least one SM left to compute; 0 where the GPU's SM count is not stated (`gpu.sms` null)."""
    if not gpu_sms:
        return 0.0
    try:
        held = EP_COMM_SMS[dispatcher]
    except KeyError:
        raise ValueError(f"parallel.ep_dispatcher {dispatcher!r}: no SM count (known: {', '.join(EP_COMM_SMS)})") from None
    return min(held, gpu_sms - 1) / gpu_sms
