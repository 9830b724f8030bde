"""NVLink SHARP (NVLS) all-reduce in one node, timed as NCCL pipelines it: in chunks whose size NCCL
picks by message size, each loop of chunks paying a fixed synchronisation cost, plus one loop to fill
the pipeline. This is why a mid-size all-reduce (2-128 MiB) reaches well under the large-message
busbw: NCCL cuts the chunk from 128 KiB to 64, 32 and 16 KiB as the message shrinks, so the fixed cost
per loop weighs more, and the one-loop fill is a larger share of a short message.

NCCL's NVLS all-reduce (src/device/all_reduce.h, runRing for NVLS) moves the message in loops of
`channels x heads x chunk` bytes: each of the `channels` thread blocks works for each of the `heads`
GPUs (the node's ranks) on one chunk per loop, reducing it through the switch (multimem ld_reduce)
and multicasting the result. With t0 the fixed cost of one loop and B the rate the links reach with
no such cost:

    time(S) = latency + S / B + loops x t0 + FILL x (t0 + channels x heads x c' / B)
    loops   = S / (channels x heads x c),   c = chunk(S),   c' = min(c, S / (channels x heads))

The chunk rule is NCCL's (src/enqueue.cc, calcCollChunking, NCCL_ALGO_NVLS branch: lines 1338-1346 at
v2.18.5-1, 2258-2274 at v2.30.7-1, the same rule): start from NCCL_NVLS_CHUNKSIZE (128 KiB) and, with
concurrentOps = channels x heads, halve to 64 KiB when S < 64 x concurrentOps x chunk, to 32 KiB when
S < 8 x concurrentOps x chunk, to 16 KiB when S < 2 x concurrentOps x chunk (chunk being the size
reached so far). On 8 GPUs that is < 1 GiB, < 64 MiB and < 8 MiB.

Multi-node NVLS (NVLS-tree) has its own chunk rule and is not modelled here; neither are Blackwell's
channel counts (24 / 32 on SM100, src/transport/nvls.cc): every NVLS node is priced with Hopper's 16.
"""
from __future__ import annotations

from dataclasses import dataclass

NVLS_CHANNELS_SM90 = 16
"""NVLS thread blocks (channels) on Hopper: NVLS_NCHANNELS_SM90, src/transport/nvls.cc line 155 at
v2.30.7-1 (v2.18.5-1: NCCL_PARAM(NvlsChannels, "NVLS_NCHANNELS", 16), line 231). NCCL's log shows it:
'NVLS comm ... nHeads 8 ... nvlsPerRankSize 201326592' = 16 channels x 2 x (4 MiB buffer + 2 MiB)."""
NVLS_HEADS_PER_RANK = 1
"""One NVLS head per GPU of the node (src/graph/connect.cc connectNvls, v2.18.5-1 line 229: nHeads = the
NVLS graph's channels, one per local rank; the log above prints nHeads 8 on 8 GPUs)."""
NVLS_CHUNK_BYTES = 128 * 1024
"""Largest NVLS chunk: NCCL_NVLS_CHUNKSIZE default 128 KiB (src/transport/nvls.cc line 160 at v2.30.7-1;
v2.18.5-1 had it as `maxChunkSize = 131072`, src/enqueue.cc line 1339)."""
NVLS_CHUNK_STEPS = ((64, 65536), (8, 32768), (2, 16384))
"""(multiple of concurrentOps x chunk below which, chunk then used), in order (src/enqueue.cc)."""
NVLS_LOOP_OVERHEAD_S = 3.8e-6
"""Fixed cost of one loop of chunks (flags, barriers through the switch). Fitted, from two slopes of the
Azure ND H100 v5 NVLS table (validation/references/collectives/nccl_tests_h100.yaml): bytes over time
added between 1 and 8 GiB (128 KiB chunks) are 274.7 GB/s, between 128 and 512 MiB (64 KiB chunks)
258.7 GB/s; the time per byte differs by t0 / (16 x 8 x 128 KiB), so t0 = (1/258.7 - 1/274.7) ns/B x
16 MiB = 3.8 us. The mid sizes (2-128 MiB) are not fitted: they test it (and the H200 table)."""
NVLS_FILL_LOOPS = 1.0
"""Loops it takes to fill the pipeline: the last loop's reduced chunk still has to be multicast, one
more loop's time (a two-stage pipeline, reduce then multicast). Structural, not fitted; with 0 the
H100 table's 2-128 MiB error is ~25 %, with 1 ~5 % (validation/collectives_midsize.py)."""


def nvls_chunk_bytes(nbytes: float, concurrent: int) -> int:
    """NCCL's NVLS chunk for an all-reduce of `nbytes` with `concurrent` = channels x heads."""
    chunk = NVLS_CHUNK_BYTES
    for multiple, smaller in NVLS_CHUNK_STEPS:
        if nbytes < multiple * concurrent * chunk and chunk > smaller:
            chunk = smaller
    return chunk


def without_loop_overhead(algbw_Bps: float, heads: int = 8, channels: int = NVLS_CHANNELS_SM90) -> float:
    """The rate B behind a measured large-message algbw (NCCL's largest chunk, many loops): the
    measured time per byte less the loop cost spread over a loop's bytes."""
    return 1.0 / (1.0 / algbw_Bps - NVLS_LOOP_OVERHEAD_S / (channels * heads * NVLS_CHUNK_BYTES))


@dataclass(frozen=True)
class NvlsPipeline:
    """How one NVLS all-reduce's time depends on its size (module docstring)."""
    heads: int
    """GPUs of the group in the node (one NVLS head each)."""
    channels: int = NVLS_CHANNELS_SM90

    @property
    def concurrent(self) -> int:
        return self.channels * self.heads * NVLS_HEADS_PER_RANK

    def time(self, nbytes: float, latency_s: float, bandwidth_Bps: float) -> float:
        """Seconds for `nbytes` at link rate `bandwidth_Bps` (B, no per-loop cost) after `latency_s`."""
        k = self.concurrent
        chunk = nvls_chunk_bytes(nbytes, k)
        loops = nbytes / (k * chunk)
        last = min(chunk, nbytes / k)
        fill = NVLS_FILL_LOOPS * (NVLS_LOOP_OVERHEAD_S + k * last / bandwidth_Bps)
        return latency_s + nbytes / bandwidth_Bps + loops * NVLS_LOOP_OVERHEAD_S + fill
