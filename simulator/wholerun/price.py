"""Default GPU-hour prices: list-price snapshots, each with its source and date. A list price is what a
cloud's public page asked on that date for on-demand capacity; reserved or negotiated prices are lower
and prices move, so `--price-per-gpu-hour` (or `run.price_per_gpu_hour`) overrides it."""
from __future__ import annotations

from dataclasses import dataclass

AWS_P5_48XLARGE_ON_DEMAND_PER_HOUR = 98.32
"""AWS p5.48xlarge (8 x H100 SXM 80GB) on-demand, US East, at launch: $98.32 per instance-hour (The Next
Platform, "H100 GPU Instance Pricing On AWS: Grin And Bear It", 2023-07-27). A list-price snapshot: AWS has
cut P5 prices since; check the current page."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ListPrice:
    per_gpu_hour: float
    source: str


LIST_PRICES = {
    "H100": ListPrice(per_gpu_hour=AWS_P5_48XLARGE_ON_DEMAND_PER_HOUR / 8,
                      source="AWS p5.48xlarge on-demand list price $98.32/h / 8 GPUs, snapshot of 2023-07-27 "
                             "(The Next Platform); prices have moved since"),
}
"""GPU kind (a word in the topology's gpu.name) -> its list price per GPU-hour."""


def list_price(gpu_name: str) -> ListPrice | None:
    """The list price of the first kind named in `gpu_name` (H100 SXM5 80GB -> H100), else None."""
    for kind, price in LIST_PRICES.items():
        if kind in gpu_name.split():
            return price
    return None
